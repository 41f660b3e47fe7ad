#!/usr/bin/env python
"""Django's command-line utility for the runqueue deployable project."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if sys.argv[1:2] == ["runqueue_chaos"]:
        # The chaos runner's app is installed only for it (config/settings.py);
        # its workers inherit this.
        os.environ["RUNQUEUE_CHAOS"] = "1"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
