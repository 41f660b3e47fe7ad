"""Recurring schedules: cron in a time zone, each tick fired once.

Defined in ``RUNQUEUE["SCHEDULES"]`` or in the admin (``Schedule`` rows);
every worker calls ``tick()`` from its periodic sweep. Runs made by a
schedule have the principal ``schedule:<name>`` and a ``schedule.fired``
event. See docs/decisions/schedules-webhooks.md, "Scheduled work".
"""

from runqueue.schedules.operate import (
    ScheduleError,
    define,
    pause,
    resume,
    run_now,
    save_definition,
    sync_settings,
)
from runqueue.schedules.ticks import ON_TIME_SECONDS, hooks, plan, tick

__all__ = [
    "ON_TIME_SECONDS",
    "ScheduleError",
    "define",
    "hooks",
    "pause",
    "plan",
    "resume",
    "run_now",
    "save_definition",
    "sync_settings",
    "tick",
]
