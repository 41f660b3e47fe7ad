"""Firing schedules: each due tick once, however many workers call ``tick()``.

Two things make a tick fire once. A schedule's due ticks are handled inside
a transaction that holds its row (``FOR UPDATE SKIP LOCKED``: a second
worker steps over it instead of queueing behind it), and every tick is a
row of ``runqueue_schedule_tick`` under a unique (schedule, tick_at)
constraint, inserted in the same transaction as its run. A worker killed
mid-tick rolls all of it back; the next worker fires the same tick.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, IntegrityError, transaction

from runqueue import events
from runqueue.db import constraint_name
from runqueue.models import CatchUp, Schedule, ScheduleTick, TickOutcome
from runqueue.schedules import cron
from runqueue.schedules.clock import db_now
from runqueue.schedules.operate import sync_settings

logger = logging.getLogger("runqueue.schedules")

#: With catch-up "none", a tick first seen later than this counts as missed.
ON_TIME_SECONDS = 60
#: Due schedules one ``tick()`` call handles; the rest wait for the next.
DUE_BATCH = 100
_TICK_CONSTRAINT = "runqueue_schedule_tick_once"


@dataclass
class Hooks:
    """A pause point for tests that kill or race a ticking process. It
    observes only: set or not, a tick runs the same statements in the
    same order; the hook sees what was written and may wait."""

    #: Called inside a schedule's transaction, after its ticks and runs
    #: are written, before commit.
    inside_tick: Callable[[Schedule, list[ScheduleTick]], None] | None = None


hooks = Hooks()


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do with the ticks in (cursor, now]: fire some, skip a window."""

    fire: tuple[dt.datetime, ...]
    #: Ticks t with skipped_from <= t < skipped_before were left out.
    skipped_from: dt.datetime | None = None
    skipped_before: dt.datetime | None = None


def plan(
    *, expr: str, tz: str, policy: str, limit: int, after: dt.datetime, now: dt.datetime
) -> Plan:
    """Apply the catch-up policy to the ticks after ``after`` up to ``now``.

    latest: the most recent tick fires, earlier missed ones are skipped.
    all: up to ``limit`` of the most recent fire, oldest first; older skipped.
    none: the most recent fires only if it is on time (ON_TIME_SECONDS).
    """
    found, more = cron.due(
        expr, tz, after=after, now=now, limit=limit if policy == CatchUp.ALL else 1
    )
    if not found:
        return Plan(fire=())
    fire = tuple(found)
    if policy == CatchUp.NONE and (now - found[-1]).total_seconds() > ON_TIME_SECONDS:
        fire = ()
    if not more and fire:
        return Plan(fire=fire)
    first = cron.next_after(expr, tz, after)
    before = fire[0] if fire else (cron.next_after(expr, tz, now) or now)
    if first is None or first >= before:
        return Plan(fire=fire)
    return Plan(fire=fire, skipped_from=first, skipped_before=before)


def tick(now: dt.datetime | None = None) -> list[ScheduleTick]:
    """Fire every due tick of every active schedule; the ticks this call fired.

    ``now`` defaults to the database clock; tests pass their own. Every
    worker calls this from its periodic sweep: any number may race.
    """
    sync_settings()
    if now is None:
        now = db_now()
    elif now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    due = Schedule.objects.due(now).order_by("next_fire_at").values_list("pk", flat=True)
    fired: list[ScheduleTick] = []
    for pk in list(due[:DUE_BATCH]):
        try:
            fired.extend(fire_due(pk, now))
        except DatabaseError:
            raise  # the connection may be gone: the caller's loop reconnects
        except Exception:
            # A kind this process does not know, a payload submit refuses:
            # nothing was written, the tick stays due, the next worker tries.
            logger.exception("Schedule id=%s was not fired", pk)
    return fired


def fire_due(pk: int, now: dt.datetime) -> list[ScheduleTick]:
    """Handle one schedule's due ticks in one transaction holding its row."""
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True).due(now).filter(pk=pk).first()
        )
        if schedule is None:
            return []  # another worker holds it, or it is no longer due
        todo = plan(
            expr=schedule.cron,
            tz=schedule.timezone,
            policy=schedule.catch_up,
            limit=schedule.catch_up_limit,
            after=schedule.handled_until,
            now=now,
        )
        ticks = [t for t in (_fire(schedule, at) for at in todo.fire) if t is not None]
        if todo.skipped_from is not None:
            _skip(schedule, todo)
        schedule.handled_until = max(schedule.handled_until, now)
        schedule.next_fire_at = cron.next_after(
            schedule.cron, schedule.timezone, schedule.handled_until
        )
        schedule.save(update_fields=["handled_until", "next_fire_at", "updated_at"])
        if hooks.inside_tick is not None:
            hooks.inside_tick(schedule, ticks)
    for t in ticks:
        logger.info("Schedule %s fired tick %s: run id=%s", schedule.name, t.tick_at, t.run_id)
    return ticks


def _fire(schedule: Schedule, at: dt.datetime) -> ScheduleTick | None:
    """The tick's row, then its run, in the schedule's transaction."""
    from runqueue.submission import submit_in_transaction

    try:
        with transaction.atomic():
            tick = ScheduleTick.objects.create(
                schedule=schedule, tick_at=at, outcome=TickOutcome.FIRED
            )
    except IntegrityError as exc:
        if constraint_name(exc) != _TICK_CONSTRAINT:
            raise
        return None  # fired (or skipped) before: the cursor was moved back
    sub = submit_in_transaction(
        kind=schedule.kind,
        payload=schedule.payload,
        tenant=schedule.tenant,
        principal=schedule.principal,
        priority=schedule.priority,
        max_attempts=schedule.max_attempts,
    )
    events.append(
        sub.run.id,
        events.SCHEDULE_FIRED,
        sub.run.lease_epoch,
        {"schedule": schedule.name, "tick_at": at.isoformat()},
    )
    tick.run = sub.run
    tick.save(update_fields=["run"])
    return tick


def _skip(schedule: Schedule, todo: Plan) -> None:
    """Record the ticks catch-up left out: never skipped silently."""
    if todo.skipped_from is None:
        return
    logger.warning(
        "Schedule %s skipped its ticks from %s up to %s (catch_up=%s)",
        schedule.name,
        todo.skipped_from,
        todo.skipped_before,
        schedule.catch_up,
    )
    try:
        with transaction.atomic():
            ScheduleTick.objects.create(
                schedule=schedule,
                tick_at=todo.skipped_from,
                outcome=TickOutcome.SKIPPED,
                skipped_before=todo.skipped_before,
            )
    except IntegrityError as exc:
        if constraint_name(exc) != _TICK_CONSTRAINT:
            raise
