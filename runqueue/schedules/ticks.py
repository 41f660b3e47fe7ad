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
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, IntegrityError, transaction

from runqueue import events
from runqueue.db import constraint_name, db_now
from runqueue.errors import ActiveRunConflict, RunqueueError, SessionQueueFull
from runqueue.models import (
    ACTIVE_STATUSES,
    CatchUp,
    Overlap,
    Run,
    Schedule,
    ScheduleTick,
    TickOutcome,
)
from runqueue.schedules import cron
from runqueue.schedules.operate import next_fire, run_fields, sync_settings

logger = logging.getLogger("runqueue.schedules")

#: With catch-up "none", a tick first seen later than this counts as missed.
ON_TIME_SECONDS = 60
#: Due schedules one ``tick()`` call handles; the rest wait for the next.
DUE_BATCH = 100
_TICK_CONSTRAINT = "runqueue_schedule_tick_once"
#: A tick looks for active runs among the runs of this many latest ticks.
OVERLAP_LOOKBACK = 20


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
        todo = _plan(schedule, now)
        ticks = [t for t in (_fire(schedule, at) for at in todo.fire) if t is not None]
        if todo.skipped_from is not None:
            _skip(schedule, todo)
        schedule.handled_until = max(schedule.handled_until, now)
        schedule.next_fire_at = next_fire(schedule)
        schedule.save(update_fields=["handled_until", "next_fire_at", "updated_at"])
        if hooks.inside_tick is not None:
            hooks.inside_tick(schedule, ticks)
    for t in ticks:
        logger.info("Schedule %s fired tick %s: run id=%s", schedule.name, t.tick_at, t.run_id)
    return ticks


def _plan(schedule: Schedule, now: dt.datetime) -> Plan:
    """A cron's plan; a one-shot's time fires once it is due, however late
    (the catch-up policy is for missed ticks of a cron)."""
    at = schedule.run_at
    if at is not None:
        return Plan(fire=(at,) if schedule.handled_until < at <= now else ())
    return plan(
        expr=schedule.cron,
        tz=schedule.timezone,
        policy=schedule.catch_up,
        limit=schedule.catch_up_limit,
        after=schedule.handled_until,
        now=now,
    )


def still_active(schedule: Schedule) -> list[uuid.UUID]:
    """Runs of the schedule's last ticks still queued, running or waiting
    (a run of an older tick that is still active is among them: ticks fire in
    order, and the last OVERLAP_LOOKBACK ticks bound the read)."""
    recent = (
        ScheduleTick.objects.filter(
            schedule=schedule, outcome=TickOutcome.FIRED, run__isnull=False
        )
        .order_by("-tick_at")
        .values("run_id")[:OVERLAP_LOOKBACK]
    )
    return list(
        Run.objects.filter(id__in=recent, status__in=ACTIVE_STATUSES).values_list("id", flat=True)
    )


def _fire(schedule: Schedule, at: dt.datetime) -> ScheduleTick | None:
    """The tick's row, then its run, in the schedule's transaction; with
    a run of an earlier tick still active, what ``schedule.overlap`` says."""
    from runqueue.submission.submit import submit_in_transaction

    active = [] if schedule.overlap == Overlap.ALLOW else still_active(schedule)
    skip = bool(active) and schedule.overlap == Overlap.SKIP
    try:
        with transaction.atomic():
            tick = ScheduleTick.objects.create(
                schedule=schedule,
                tick_at=at,
                outcome=TickOutcome.OVERLAPPED if skip else TickOutcome.FIRED,
            )
    except IntegrityError as exc:
        if constraint_name(exc) != _TICK_CONSTRAINT:
            raise
        return None  # fired (or skipped) before: the cursor was moved back
    if skip:
        logger.info(
            "Schedule %s skipped tick %s: run id=%s is still active (overlap=skip)",
            schedule.name,
            at,
            active[0],
        )
        return None
    if active:  # cancel_previous: once this tick's run is committed
        transaction.on_commit(lambda: _cancel_previous(schedule.name, at, active))
    try:
        with transaction.atomic():
            sub = submit_in_transaction(**run_fields(schedule))
    except (ActiveRunConflict, SessionQueueFull) as exc:
        # Its session is busy and its on_busy refuses the turn: recorded,
        # not retried at every tick (the next tick is another turn).
        logger.info("Schedule %s skipped tick %s: %s", schedule.name, at, exc)
        tick.outcome = TickOutcome.BUSY
        tick.save(update_fields=["outcome"])
        return None
    events.append(
        sub.run.id,
        events.SCHEDULE_FIRED,
        sub.run.lease_epoch,
        {"schedule": schedule.name, "tick_at": at.isoformat()},
    )
    tick.run = sub.run
    tick.save(update_fields=["run"])
    return tick


def _cancel_previous(name: str, at: dt.datetime, run_ids: list[uuid.UUID]) -> None:
    """Cancel the runs a new tick replaces (overlap=cancel_previous); one
    that finished meanwhile is left as it is."""
    from runqueue.leases import cancel

    for run_id in run_ids:
        try:
            cancel(
                run_id,
                reason=f"schedule {name}: replaced by its tick at {at.isoformat()}",
                actor=f"schedule:{name}",
            )
        except RunqueueError as exc:
            logger.info("Schedule %s did not cancel run id=%s: %s", name, run_id, exc)


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
