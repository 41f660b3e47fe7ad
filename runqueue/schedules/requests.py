"""A schedule asked for over the API or by ``ctx.schedule``: its rules,
checked once, every problem with the JSON Pointer of its member.

A schedule is a cron in a time zone or a one-shot ``run_at`` (exactly one),
and the run each tick submits: that run follows ``submit``'s rules
(``check_submission``, not restated here), so a schedule submit would
refuse is refused where it is made, not at every tick.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from dataclasses import dataclass

from runqueue.models import Overlap, Schedule
from runqueue.schedules import cron
from runqueue.schedules.spec import RESERVED_PREFIX
from runqueue.submission.rules import Problem, check_submission
from runqueue.types import JSON

#: The names of API and handler schedules: this prefix and a UUID (the
#: schedule's id over the API). Settings and the admin may not use it.
NAME_PREFIX = RESERVED_PREFIX
#: What a session-aimed schedule's runs do when the session is busy, unless
#: it says: wait in line as the next turn (never taken as the answer of a
#: run waiting for the user).
SESSION_ON_BUSY = "enqueue"
#: Namespace of the ids made from an Idempotency-Key (``keyed_id``).
_KEYED = uuid.UUID("5a0e7b1c-4f7e-4b61-9a40-5c8e2d6f3a11")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRequest:
    """A checked schedule: what it stores, defaults filled in."""

    kind: str
    payload: JSON
    priority: int
    cron: str
    timezone: str
    run_at: dt.datetime | None
    session_id: str | None
    on_busy: str | None
    overlap: str
    runs_may_schedule: bool

    def fields(self) -> dict[str, object]:
        """The Schedule model's definition fields: every field of the request."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def same_as(self, schedule: Schedule) -> bool:
        """``schedule`` is this request's (a replay of its create)."""
        return all(getattr(schedule, name) == value for name, value in self.fields().items())


def name_of(schedule_id: uuid.UUID) -> str:
    return f"{NAME_PREFIX}{schedule_id}"


def id_of(schedule: Schedule) -> uuid.UUID:
    """The API id of an API or handler schedule (its name holds it)."""
    return uuid.UUID(schedule.name.removeprefix(NAME_PREFIX))


def keyed_id(tenant: str, principal: str, key: str) -> uuid.UUID:
    """The id a create with this Idempotency-Key makes: the same key of the
    same caller names the same schedule, so a retry finds it (the name is
    unique) and never makes a second."""
    return uuid.uuid5(_KEYED, "\x00".join((tenant, principal, key)))


def check_request(
    *,
    kind: object,
    payload: object = None,
    priority: object,
    cron_expr: object = None,
    timezone: object = None,
    run_at: object = None,
    session_id: object = None,
    on_busy: object = None,
    overlap: object = None,
    runs_may_schedule: object = False,
    tenant: str,
    now: dt.datetime,
    from_json: bool = False,
    registered_only: bool = True,
) -> tuple[ScheduleRequest | None, list[Problem]]:
    """The checked request (None if any problem), and every problem.

    ``run_at`` is an RFC 3339 string (``from_json``) or an aware datetime,
    after ``now`` (the database's clock); a timedelta from a handler is
    added to ``now``.
    """
    if isinstance(run_at, dt.timedelta):
        run_at = now + run_at
    checked, problems = check_submission(
        kind=kind,
        payload=payload,
        session_id=session_id,
        tenant=tenant,
        principal=f"schedule:{name_of(uuid.UUID(int=0))}",
        priority=priority,
        scheduled_for=run_at,
        on_busy=on_busy,
        from_json=from_json,
        registered_only=registered_only,
    )
    problems = [
        Problem("/run_at", p.detail) if p.pointer == "/scheduled_for" else p for p in problems
    ]
    expr, zone = _when(cron_expr, timezone, run_at, problems)
    if expr and not problems and cron.next_after(expr, zone, now) is None:
        problems.append(Problem("/cron", f"{expr!r} never fires"))
    when = checked.scheduled_for if checked is not None else None
    if when is not None and when <= now:
        problems.append(Problem("/run_at", f"is in the past (it is {now.isoformat()} now)"))
    if on_busy is not None and session_id is None:
        problems.append(Problem("/on_busy", "applies to a schedule aimed at a session_id"))
    overlap = Overlap.SKIP if overlap is None else overlap
    if overlap not in Overlap.values:
        problems.append(Problem("/overlap", f"must be one of {', '.join(Overlap.values)}"))
    if not isinstance(runs_may_schedule, bool):
        problems.append(Problem("/runs_may_schedule", "must be true or false"))
    if problems or checked is None:
        return None, problems
    return ScheduleRequest(
        kind=checked.kind,
        payload=checked.payload,
        priority=checked.priority,
        cron=expr,
        timezone=zone,
        run_at=when,
        session_id=checked.session_id,
        on_busy=checked.on_busy or (SESSION_ON_BUSY if checked.session_id else None),
        overlap=str(overlap),
        runs_may_schedule=bool(runs_may_schedule),
    ), problems


def _when(
    expr: object, timezone: object, run_at: object, problems: list[Problem]
) -> tuple[str, str]:
    """The cron and its zone ("" and "UTC" for a one-shot), problems appended."""
    if expr is not None and run_at is not None:
        problems.append(Problem("/run_at", "give cron (recurring) or run_at (once), not both"))
        return "", "UTC"
    if expr is None and run_at is None:
        problems.append(
            Problem("/cron", "is required unless run_at is given: a schedule recurs or fires once")
        )
        return "", "UTC"
    if run_at is not None:
        if timezone is not None:
            problems.append(
                Problem("/timezone", "applies to cron only: run_at carries its own UTC offset")
            )
        return "", "UTC"
    normal = ""
    try:
        normal = cron.validate(expr)
    except ValueError as exc:
        problems.append(Problem("/cron", str(exc)))
    zone = "UTC" if timezone is None else timezone
    try:
        cron.zone(zone)
    except ValueError as exc:
        problems.append(Problem("/timezone", str(exc)))
        zone = "UTC"
    return normal, str(zone)
