"""runqueue's benchmarks: ``python -m tools.bench`` (see tools/bench/README.md)."""
