"""Schedules a tenant owns: made over the API (``POST /api/schedules/``,
owned by a token) or by a handler (``ctx.schedule``), deleted over the API.

With ``operate``, the only writer of ``runqueue_schedule``. Limits bound
how many may still fire: ``API_SCHEDULES_PER_TOKEN`` per token (checked
under the token's row lock, so concurrent creates cannot pass it) and
``HANDLER_SCHEDULES_PER_TENANT`` for handlers. A run a schedule started (or
a child of one: it has the schedule's principal) may make schedules only
if that schedule allows it, so a reminder cannot multiply itself by
accident. See docs/decisions/schedules-webhooks.md, "Schedules over the API".
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction

from runqueue import events, leases
from runqueue.conf import get_settings
from runqueue.db import db_now
from runqueue.errors import (
    IdempotencyConflict,
    InvalidSubmission,
    PermanentError,
    ScheduleRefused,
)
from runqueue.models import ApiToken, Run, Schedule, ScheduleSource, ToolInvocation
from runqueue.schedules.operate import ScheduleError, next_fire
from runqueue.schedules.requests import ScheduleRequest, check_request, name_of

#: The tool name ``ctx.schedule`` is recorded under, in the run's call order.
SCHEDULE_TOOL = "runqueue.schedule"
#: Namespace of the ids of handler schedules: (run, call number) names one.
_BY_RUN = uuid.UUID("0b8f2f5e-3c1d-4d7a-8e62-2a9c4b7d1e05")


class ScheduleLimitReached(ScheduleError):
    """The token owns as many schedules that can still fire as it may."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"this token already owns {limit} schedules that can still fire")


def create(
    request: ScheduleRequest,
    *,
    schedule_id: uuid.UUID,
    tenant: str,
    created_by: str,
    token: ApiToken | None,
    key: str,
) -> tuple[Schedule, bool]:
    """Make an API schedule, or find the one an earlier request with the
    same key made: (the schedule, True if made now). IdempotencyConflict if
    that request asked for another schedule; ScheduleLimitReached past the
    token's limit (a replay is never refused for it)."""
    existing = _keyed(schedule_id, tenant, request, key)
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            if token is not None:
                _within_token_limit(token)
            schedule = _insert(
                request,
                name=name_of(schedule_id),
                source=ScheduleSource.API,
                tenant=tenant,
                created_by=created_by,
                token=token,
            )
    except IntegrityError:
        # The same key's request committed first: replay it.
        existing = _keyed(schedule_id, tenant, request, key)
        if existing is None:
            raise
        return existing, False
    return schedule, True


def _keyed(
    schedule_id: uuid.UUID, tenant: str, request: ScheduleRequest, key: str
) -> Schedule | None:
    existing = Schedule.objects.filter(name=name_of(schedule_id)).first()
    if existing is None:
        return None
    if existing.tenant != tenant or not request.same_as(existing):
        raise IdempotencyConflict(key)
    return existing


def _within_token_limit(token: ApiToken) -> None:
    """Hold the token's row (its creates one at a time) and count."""
    limit = get_settings().API_SCHEDULES_PER_TOKEN
    if limit is None:
        return
    ApiToken.objects.select_for_update().filter(pk=token.pk).values_list("pk").first()
    if Schedule.objects.live().filter(token=token).count() >= limit:
        raise ScheduleLimitReached(limit)


def _insert(
    request: ScheduleRequest,
    *,
    name: str,
    source: str,
    tenant: str,
    created_by: str,
    token: ApiToken | None = None,
) -> Schedule:
    """The row, its cursor now and its first fire time, and its queue event."""
    schedule = Schedule(
        name=name,
        source=source,
        tenant=tenant,
        created_by=created_by,
        token=token,
        handled_until=db_now(),
        **request.fields(),
    )
    schedule.next_fire_at = next_fire(schedule)
    schedule.save(force_insert=True)
    events.record(
        events.SCHEDULE_CREATED,
        schedule.name,
        {"actor": created_by, "source": source, "kind": schedule.kind},
    )
    return schedule


def delete(schedule: Schedule, *, actor: str) -> None:
    """Delete the schedule and its ticks; the runs it made stay as they are."""
    with transaction.atomic():
        deleted, _ = Schedule.objects.filter(pk=schedule.pk).delete()
        if deleted:
            events.record(events.SCHEDULE_DELETED, schedule.name, {"actor": actor})


def refusal(run: Run) -> str | None:
    """Why ``run`` may not make schedules, or None. A run a schedule started
    (its principal ``schedule:<name>``, children included) may only if that
    schedule says ``runs_may_schedule``; a deleted schedule allows nothing."""
    name = run.principal.removeprefix("schedule:")
    if name == run.principal:
        return None
    allowed = (
        Schedule.objects.filter(name=name, tenant=run.tenant)
        .values_list("runs_may_schedule", flat=True)
        .first()
    )
    if allowed:
        return None
    return (
        f"run {run.id} was started by schedule {name!r}, which does not let its runs make "
        "schedules (runs_may_schedule is false)"
    )


def create_for_run(lease: leases.Lease, seq: int, **options: Any) -> uuid.UUID | None:
    """Make a handler schedule as the run's call ``seq``, behind its fence:
    its id, or None once fenced (nothing written). ``options``:
    ``check_request``'s, the run's priority the default. ScheduleRefused
    when the run may not, or its tenant's handlers own as many as they
    may; InvalidSubmission naming the first problem of the request."""
    run = lease.run
    if (why := refusal(run)) is not None:
        raise ScheduleRefused(why)
    if options.get("priority") is None:
        options["priority"] = run.priority
    request, problems = check_request(**options, tenant=run.tenant, now=db_now())
    if request is None:
        raise InvalidSubmission(problems[0].field, problems[0].detail)
    limit = get_settings().HANDLER_SCHEDULES_PER_TENANT
    owned = Schedule.objects.live().filter(tenant=run.tenant, source=ScheduleSource.HANDLER)
    if limit is not None and owned.count() >= limit:
        raise ScheduleRefused(
            f"the handlers of tenant {run.tenant!r} already own {limit} schedules that can "
            "still fire (HANDLER_SCHEDULES_PER_TENANT)"
        )
    schedule_id = uuid.uuid5(_BY_RUN, f"{run.id}:{seq}")

    def effect() -> dict[str, str]:
        _insert(
            request,
            name=name_of(schedule_id),
            source=ScheduleSource.HANDLER,
            tenant=run.tenant,
            created_by=f"run:{run.id}",
        )
        return {"schedule_id": str(schedule_id)}

    arguments = {"kind": request.kind, "cron": request.cron, "session_id": request.session_id}
    arguments["run_at"] = request.run_at.isoformat() if request.run_at else None
    made = leases.record_effect(
        lease, seq=seq, tool=SCHEDULE_TOOL, arguments=arguments, effect=effect
    )
    return None if made is None else schedule_id


def replayed(recorded: ToolInvocation, kind: str) -> uuid.UUID:
    """The schedule an earlier attempt made as this call; PermanentError if
    that call was something else."""
    arguments = recorded.arguments if isinstance(recorded.arguments, dict) else {}
    if (
        recorded.tool != SCHEDULE_TOOL
        or arguments.get("kind") != kind
        or not isinstance(recorded.result, dict)
    ):
        raise PermanentError(
            f"tool call #{recorded.seq} was {recorded.tool!r} on an earlier attempt and is a "
            f"schedule of {kind!r} now: a handler must make its calls in the same order"
        )
    return uuid.UUID(str(recorded.result["schedule_id"]))


def state(schedule: Schedule) -> str:
    """active, paused, or done (a one-shot handled: it fires no more)."""
    if schedule.run_at is not None and schedule.handled_until >= schedule.run_at:
        return "done"
    return "paused" if schedule.paused_at is not None else "active"
