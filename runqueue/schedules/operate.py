"""Schedules' life cycle: settings synced into rows, admin definitions,
pause, resume and run now. The only writer of ``runqueue_schedule``.

Settings win a name clash: a schedule in ``RUNQUEUE["SCHEDULES"]`` takes
over an admin-made row of the same name (logged), and the admin refuses to
create one. A settings schedule that disappears from settings is retired:
it stops firing and stays, with its ticks, until staff delete it; if it
comes back it is un-retired and fires from then on (no catch-up for the
time it was gone).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from runqueue import events
from runqueue.conf import Settings, get_settings
from runqueue.db import db_now
from runqueue.errors import RunqueueError
from runqueue.models import Run, Schedule, ScheduleSource, ScheduleTick, TickOutcome
from runqueue.schedules import cron
from runqueue.schedules.spec import ScheduleSpec, configured

if TYPE_CHECKING:
    from runqueue.submission.keys import Submission

logger = logging.getLogger("runqueue.schedules")

_synced: Settings | None = None
_sync_lock = threading.Lock()


class ScheduleError(RunqueueError):
    """A schedule operation refused: the message says why."""


def sync_settings(*, force: bool = False) -> None:
    """Bring the rows in line with RUNQUEUE["SCHEDULES"], once per process
    and settings (every worker does it; it is idempotent)."""
    global _synced
    conf = get_settings()
    with _sync_lock:
        if _synced is conf and not force:
            return
        apply_specs(configured(conf))
        _synced = conf


def apply_specs(specs: tuple[ScheduleSpec, ...], now: dt.datetime | None = None) -> None:
    """Create, update, take over, retire and un-retire settings schedules."""
    now = now or db_now()
    names = {spec.name for spec in specs}
    with transaction.atomic():
        rows = {
            row.name: row
            for row in Schedule.objects.select_for_update().filter(
                Q(name__in=names) | Q(source=ScheduleSource.SETTINGS)
            )
        }
        for spec in specs:
            row = rows.get(spec.name) or _create(spec, now)
            if row is not None:
                _update(row, spec, now)
        for row in rows.values():
            if row.name not in names and row.retired_at is None:
                row.retired_at = now
                row.save(update_fields=["retired_at", "updated_at"])
                logger.warning("Schedule %s is no longer in settings: retired", row.name)


def _create(spec: ScheduleSpec, now: dt.datetime) -> Schedule | None:
    """A new settings schedule; None if it exists already (then it is updated)."""
    try:
        with transaction.atomic():
            Schedule.objects.create(
                name=spec.name,
                source=ScheduleSource.SETTINGS,
                handled_until=now,
                next_fire_at=cron.next_after(spec.cron, spec.timezone, now),
                **spec.fields(),
            )
        return None
    except IntegrityError:
        # Another process created it since this one looked: take its row.
        return Schedule.objects.select_for_update().get(name=spec.name)


def _update(row: Schedule, spec: ScheduleSpec, now: dt.datetime) -> None:
    wanted = spec.fields()
    changed = [name for name, value in wanted.items() if getattr(row, name) != value]
    if not changed and row.source == ScheduleSource.SETTINGS and row.retired_at is None:
        return
    if row.source != ScheduleSource.SETTINGS:
        logger.warning("Schedule %s is defined in settings: settings take it over", row.name)
    for name, value in wanted.items():
        setattr(row, name, value)
    if row.retired_at is not None:
        row.handled_until = max(row.handled_until, now)
        row.retired_at = None
    row.source = ScheduleSource.SETTINGS
    row.next_fire_at = cron.next_after(row.cron, row.timezone, row.handled_until)
    row.save()


def save_definition(schedule: Schedule) -> Schedule:
    """Store an admin-made schedule (new or edited): its cursor starts now,
    and its next fire time follows its cron from the cursor."""
    if schedule.source == ScheduleSource.SETTINGS:
        raise ScheduleError(f"schedule {schedule.name!r} is defined in settings: edit it there")
    if schedule.source in (ScheduleSource.API, ScheduleSource.HANDLER):
        raise ScheduleError(
            f"schedule {schedule.name!r} was made by its tenant: pause or delete it, "
            "its owner makes a new one"
        )
    if any(spec.name == schedule.name for spec in configured()):
        raise ScheduleError(f"schedule {schedule.name!r} is defined in settings, which win")
    schedule.cron = cron.validate(schedule.cron)
    cron.zone(schedule.timezone)
    if schedule.handled_until is None:
        schedule.handled_until = db_now()
    schedule.next_fire_at = cron.next_after(
        schedule.cron, schedule.timezone, schedule.handled_until
    )
    schedule.save()
    return schedule


def define(name: str, **fields: object) -> Schedule:
    """Create or redefine an admin-kind schedule from code (the demo does)."""
    schedule = Schedule.objects.filter(name=name).first() or Schedule(name=name)
    for field, value in fields.items():
        setattr(schedule, field, value)
    return save_definition(schedule)


def next_fire(schedule: Schedule) -> dt.datetime | None:
    """The first fire time after the schedule's cursor (None: never again):
    a one-shot's time until it is handled, else its cron's next tick."""
    if schedule.run_at is not None:
        return schedule.run_at if schedule.run_at > schedule.handled_until else None
    return cron.next_after(schedule.cron, schedule.timezone, schedule.handled_until)


def pause(schedule_id: int, *, actor: str, reason: str) -> Schedule:
    """Stop firing; ticks while paused are not caught up on resume."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=schedule_id)
        if schedule.paused_at is not None:
            raise ScheduleError(f"schedule {schedule.name!r} is already paused")
        schedule.paused_at = db_now()
        schedule.paused_by = actor
        schedule.pause_reason = reason
        schedule.save(update_fields=["paused_at", "paused_by", "pause_reason", "updated_at"])
        events.record(events.SCHEDULE_PAUSED, schedule.name, {"actor": actor, "reason": reason})
    return schedule


def resume(schedule_id: int, *, actor: str, reason: str = "") -> Schedule:
    """Fire again from now on: the ticks of the pause are not fired."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=schedule_id)
        if schedule.paused_at is None:
            raise ScheduleError(f"schedule {schedule.name!r} is not paused")
        paused_since = schedule.paused_at
        now = db_now()
        schedule.paused_at = None
        schedule.paused_by = schedule.pause_reason = ""
        if schedule.run_at is None:
            # A one-shot keeps its cursor: its time, if it passed, fires now.
            schedule.handled_until = max(schedule.handled_until, now)
        schedule.next_fire_at = next_fire(schedule)
        schedule.save()
        events.record(
            events.SCHEDULE_RESUMED,
            schedule.name,
            {"actor": actor, "reason": reason, "paused_since": paused_since.isoformat()},
        )
    return schedule


def run_fields(schedule: Schedule) -> dict[str, Any]:
    """What each run of ``schedule`` is submitted with, a tick's or ``run_now``'s."""
    return {
        "kind": schedule.kind,
        "payload": schedule.payload,
        "tenant": schedule.tenant,
        "principal": schedule.principal,
        "priority": schedule.priority,
        "max_attempts": schedule.max_attempts,
        "session_id": schedule.session_id,
        "on_busy": schedule.on_busy,
    }


def run_now(schedule_id: int, *, actor: str, idempotency_key: str) -> Submission:
    """A normal submit of the schedule's run, outside its ticks: the
    idempotency key makes a repeated request (a double click) one run."""
    from runqueue.submission.submit import submit

    schedule = Schedule.objects.get(pk=schedule_id)
    sub = submit(**run_fields(schedule), idempotency_key=idempotency_key)
    if sub.outcome == "created":
        with transaction.atomic():
            # Under the run row's lock, as every event insert, so a run's event
            # ids follow commit order (the event stream's cursor needs it).
            epoch = (
                Run.objects.select_for_update(no_key=True)
                .values_list("lease_epoch", flat=True)
                .get(id=sub.run.id)
            )
            data = {"schedule": schedule.name, "run_now": True, "actor": actor}
            events.append(sub.run.id, events.SCHEDULE_FIRED, epoch, data)
            # Listed with the schedule's last runs; overlap looks at fired ticks only.
            ScheduleTick.objects.create(
                schedule=schedule, tick_at=db_now(), outcome=TickOutcome.RUN_NOW, run=sub.run
            )
            events.record(
                events.SCHEDULE_RUN_NOW, schedule.name, {"actor": actor, "run": str(sub.run.id)}
            )
    return sub
