"""``python -m tools.bench.manage ARGS``: exactly ``manage.py ARGS`` (``migrate`` on
a database the bench made elsewhere, e.g. a cluster pair), with runqueue and
``config`` imported from ``BENCH_RUNQUEUE_SRC`` when it is set (``tools.bench.src``)."""

from __future__ import annotations

import os
import sys

from tools.bench import src


def main() -> None:
    src.apply()
    src.verify()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[1:]])


if __name__ == "__main__":
    main()
