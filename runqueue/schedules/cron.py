"""Cron expressions through ``cronsim``: validation, words, fire times.

No cron parsing of our own. cronsim evaluates an expression in a time zone
the way Debian's cron does, DST transitions included: a job at a fixed
local time that falls in the hour skipped in spring runs once, right after
the jump; one in the hour repeated in autumn runs once, the first time.
Every time leaving this module is in UTC, so comparisons are of instants
(two aware datetimes of one zone compare by wall clock, ignoring ``fold``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

#: Forward steps that may repeat or precede the start (an autumn DST fold).
_MAX_STEPS = 10


def validate(expr: object) -> str:
    """The expression with single spaces; ValueError naming what is wrong."""
    if not isinstance(expr, str):
        raise ValueError(f"a cron expression is a string, got {type(expr).__name__}")
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(
            f"{expr!r} has {len(fields)} fields; a cron expression has five: "
            "minute hour day-of-month month day-of-week"
        )
    normal = " ".join(fields)
    try:
        CronSim(normal, dt.datetime(2000, 1, 1))  # noqa: DTZ001 - parse only
    except CronSimError as exc:
        raise ValueError(f"{expr!r} is not a valid cron expression: {exc}") from exc
    return normal


def zone(name: object) -> ZoneInfo:
    """The IANA time zone of that name; ValueError if there is none."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a time zone is an IANA name such as 'Europe/Paris', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def explain(expr: str) -> str:
    """The expression in English words, from cronsim's ``explain()``."""
    return CronSim(expr, dt.datetime(2000, 1, 1)).explain()  # noqa: DTZ001 - words only


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC)


def upcoming(expr: str, tz: str, after: dt.datetime) -> Iterator[dt.datetime]:
    """Fire times strictly after ``after``, in order, as UTC instants."""
    last = _utc(after)
    it = CronSim(expr, last.astimezone(zone(tz)))
    while True:
        for _ in range(_MAX_STEPS):
            try:
                moment = _utc(next(it))
            except StopIteration:
                return
            if moment > last:
                break
        else:
            return
        last = moment
        yield moment


def next_after(expr: str, tz: str, after: dt.datetime) -> dt.datetime | None:
    """The first fire time strictly after ``after`` (None: never again)."""
    return next(upcoming(expr, tz, after), None)


def due(
    expr: str, tz: str, *, after: dt.datetime, now: dt.datetime, limit: int
) -> tuple[list[dt.datetime], bool]:
    """The latest ``limit`` fire times in (after, now], oldest first, and
    whether earlier ones in that window were left out.

    Walks backwards from ``now``, so the cost is ``limit`` steps however
    long the workers were down.
    """
    after, now = _utc(after), _utc(now)
    # cronsim's reverse walk starts one second before its start: start a
    # second after ``now`` (whole seconds) so a tick at ``now`` counts.
    start = now.replace(microsecond=0) + dt.timedelta(seconds=1)
    it = CronSim(expr, start.astimezone(zone(tz)), reverse=True)
    found: list[dt.datetime] = []
    for local in it:
        moment = _utc(local)
        if moment <= after:
            return found[::-1], False
        if moment > now or (found and moment >= found[-1]):
            continue
        if len(found) == limit:
            return found[::-1], True
        found.append(moment)
    return found[::-1], False
