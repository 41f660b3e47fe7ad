"""Peers, through their public APIs (``pip install -e .[bench]``)."""
