"""A process that ticks the schedules once at a clock the test gives.

``python -m tests.workers.schedule_ticker NOW [--go FILE] [--hold]``: prints READY,
waits for FILE to exist (the tests' start line for racing processes), runs
``schedules.tick(now=NOW)`` and prints ``FIRED <n>``. With ``--hold`` it
prints ``HELD <n>`` inside the tick's transaction, after the tick's run is
written and before commit, and waits there to be killed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import threading
import time
from pathlib import Path

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("now")
    parser.add_argument("--go")
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.worker_settings")
    django.setup()
    from runqueue import schedules

    if args.hold:

        def hold(schedule: object, ticks: list) -> None:
            print(f"HELD {len(ticks)}", flush=True)
            threading.Event().wait()  # until killed

        schedules.hooks.inside_tick = hold
    print("READY", flush=True)
    if args.go:
        deadline = time.monotonic() + 60
        while not Path(args.go).exists():
            if time.monotonic() > deadline:
                sys.exit("never told to go")
            time.sleep(0.001)
    fired = schedules.tick(now=dt.datetime.fromisoformat(args.now))
    print(f"FIRED {len(fired)}", flush=True)


if __name__ == "__main__":
    main()
