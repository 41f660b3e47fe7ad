"""``python -m runqueue.conf --reference``: print docs/settings.md."""

import sys

from runqueue.conf.reference import reference

if __name__ == "__main__":
    if sys.argv[1:] != ["--reference"]:
        sys.exit("usage: python -m runqueue.conf --reference > docs/settings.md")
    sys.stdout.write(reference())
