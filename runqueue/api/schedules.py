"""``/api/schedules/``: create, list, read, pause, resume and delete the
schedules of the caller's tenant made over the API or by handlers.

Thin, as the run views are: the body is checked by
``runqueue.schedules.requests``, written by ``runqueue.schedules`` (owned,
operate). A schedule of another tenant, or one of staff's or the
settings', is answered as a missing one. Every write counts against the
token's quota; a create needs an Idempotency-Key, as a submit does.
"""

from __future__ import annotations

import uuid
from typing import TypedDict

from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from runqueue import registry
from runqueue.api import admission, parsing
from runqueue.api.auth import Caller
from runqueue.api.endpoint import api_view, int_param, mapped
from runqueue.api.errors import ApiError, FieldError, not_found, validation_failed
from runqueue.api.render import run_url
from runqueue.conf import RESERVED_KIND_PREFIXES
from runqueue.db import db_now
from runqueue.errors import RunqueueError
from runqueue.events import public_time
from runqueue.models import Schedule, ScheduleSource, ScheduleTick
from runqueue.schedules import operate, owned
from runqueue.schedules.requests import (
    ScheduleRequest,
    check_request,
    id_of,
    keyed_id,
    name_of,
)
from runqueue.submission.rules import Problem, unregistered
from runqueue.types import JSON
from runqueue.validation import text_problem

#: The members a create's body may have.
FIELDS = frozenset(
    {
        "kind",
        "payload",
        "priority",
        "cron",
        "timezone",
        "run_at",
        "session_id",
        "on_busy",
        "overlap",
        "runs_may_schedule",
    }
)
SOURCES = (ScheduleSource.API, ScheduleSource.HANDLER)


class ScheduleBody(TypedDict):
    id: str
    url: str
    kind: str
    payload: JSON
    priority: int
    cron: str | None
    timezone: str | None
    run_at: str | None
    session_id: str | None
    on_busy: str | None
    overlap: str
    runs_may_schedule: bool
    state: str
    paused_at: str | None
    pause_reason: str
    next_fire_at: str | None
    last_run: str | None
    source: str
    created_by: str
    created_at: str | None


def schedule_url(schedule_id: uuid.UUID) -> str:
    return reverse("runqueue-api:schedule", kwargs={"schedule_id": str(schedule_id)})


def schedule_body(schedule: Schedule) -> ScheduleBody:
    """A schedule as the API shows it; ``last_run`` is annotated by ``_rows``."""
    schedule_id = id_of(schedule)
    last_run = getattr(schedule, "last_run_id", None)
    once = schedule.run_at is not None
    paused = schedule.paused_at is not None
    return {
        "id": str(schedule_id),
        "url": schedule_url(schedule_id),
        "kind": schedule.kind,
        "payload": schedule.payload,
        "priority": schedule.priority,
        "cron": None if once else schedule.cron,
        "timezone": None if once else schedule.timezone,
        "run_at": public_time(schedule.run_at),
        "session_id": schedule.session_id,
        "on_busy": schedule.on_busy,
        "overlap": schedule.overlap,
        "runs_may_schedule": schedule.runs_may_schedule,
        "state": owned.state(schedule),
        "paused_at": public_time(schedule.paused_at),
        "pause_reason": schedule.pause_reason,
        "next_fire_at": None if paused else public_time(schedule.next_fire_at),
        "last_run": None if last_run is None else run_url(last_run),
        "source": schedule.source,
        "created_by": schedule.created_by,
        "created_at": public_time(schedule.created_at),
    }


def _rows(caller: Caller) -> QuerySet[Schedule]:
    """The caller's tenant's API and handler schedules, each with its last run."""
    last = (
        ScheduleTick.objects.filter(schedule=OuterRef("pk"), run__isnull=False)
        .order_by("-tick_at")
        .values("run_id")[:1]
    )
    return Schedule.objects.filter(tenant=caller.tenant, source__in=SOURCES).annotate(
        last_run_id=Subquery(last)
    )


def _found_again(caller: Caller, schedule: Schedule) -> Schedule:
    """The schedule read again after a write (deleted meanwhile: 404)."""
    again = _rows(caller).filter(pk=schedule.pk).first()
    if again is None:
        raise not_found("schedule")
    return again


def _schedule_or_404(caller: Caller, schedule_id: str) -> Schedule:
    try:
        parsed = uuid.UUID(schedule_id)
    except ValueError:
        raise not_found("schedule") from None
    schedule = _rows(caller).filter(name=name_of(parsed)).first()
    if schedule is None:
        raise not_found("schedule")
    return schedule


@api_view("GET", "POST")
def schedules(request: HttpRequest, caller: Caller) -> HttpResponse:
    """GET: the tenant's schedules, a page at a time; POST: make one."""
    if request.method == "POST":
        return _create(request, caller)
    return _list(request, caller)


def _create(request: HttpRequest, caller: Caller) -> HttpResponse:
    """201 with the schedule (a replay of the same key: the first one)."""
    admission.take_quota(caller)
    body = parsing.parse_json(request, parsing.read_body(request))
    key = parsing.idempotency_key(request, "schedule")
    checked = _checked(caller, body)
    try:
        schedule, made = owned.create(
            checked,
            schedule_id=keyed_id(caller.tenant, caller.principal, key),
            tenant=caller.tenant,
            created_by=caller.principal,
            token=caller.token,
            key=key,
        )
    except owned.ScheduleLimitReached as exc:
        raise ApiError(
            "schedule-limit-reached",
            f"This token already owns {exc.limit} schedules that can still fire; delete one "
            "(or wait for a one-shot to fire) before making another.",
            extensions={"limit": exc.limit},
        ) from exc
    except RunqueueError as exc:
        raise mapped(exc) from exc
    response = JsonResponse(schedule_body(_found_again(caller, schedule)), status=201)
    response["Location"] = schedule_url(id_of(schedule))
    if not made:
        response["Idempotent-Replayed"] = "true"
    return response


def _checked(caller: Caller, body: JSON) -> ScheduleRequest:
    """The body checked: 422 listing every problem, then the kind and the
    priority the caller may use (the default: its ceiling, as a submit's)."""
    if not isinstance(body, dict):
        raise validation_failed([{"pointer": "", "detail": "the body must be a JSON object"}])
    errors: list[FieldError] = [
        {"pointer": parsing.pointer(name), "detail": "unknown field"}
        for name in sorted(set(body) - FIELDS)
    ]
    checked, problems = check_request(
        kind=body.get("kind"),
        payload=body.get("payload"),
        priority=body.get("priority", int(admission.ceiling(caller))),
        cron_expr=body.get("cron"),
        timezone=body.get("timezone"),
        run_at=body.get("run_at"),
        session_id=body.get("session_id"),
        on_busy=body.get("on_busy"),
        overlap=body.get("overlap"),
        runs_may_schedule=body.get("runs_may_schedule", False),
        tenant=caller.tenant,
        now=db_now(),
        from_json=True,
        registered_only=False,
    )
    kind = body.get("kind")
    if "kind" not in body:
        problems = [Problem("/kind", "is required"), *problems]
    elif isinstance(kind, str) and kind.startswith(RESERVED_KIND_PREFIXES):
        problems = [Problem("/kind", f"kind {kind!r} is reserved"), *problems]
    errors.extend({"pointer": p.pointer, "detail": p.detail} for p in problems)
    if errors or checked is None:
        raise validation_failed(errors)
    admission.admit_kind(checked.kind)
    admission.admit_priority(caller, checked.priority)
    if not registry.is_registered(checked.kind):
        problem = unregistered(checked.kind)
        raise validation_failed([{"pointer": problem.pointer, "detail": problem.detail}])
    return checked


def _list(request: HttpRequest, caller: Caller) -> HttpResponse:
    """Sorted by id; ``session_id`` and ``kind`` filter, ``after`` (an id)
    continues from the page that ended there."""
    limit = int_param(request, "limit", parsing.SCHEDULE_PAGE, 1, parsing.MAX_SCHEDULE_PAGE)
    rows = _rows(caller)
    for name in ("session_id", "kind"):
        value = request.GET.get(name)
        if value is not None:
            rows = rows.filter(**{name: _text_param(name, value)})
    after = request.GET.get("after")
    if after is not None:
        try:
            rows = rows.filter(name__gt=name_of(uuid.UUID(after)))
        except ValueError:
            raise ApiError(
                "invalid-parameter",
                "after must be a schedule's id (the last of the previous page).",
                extensions={"parameter": "after"},
            ) from None
    page = list(rows.order_by("name")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_url = None
    if more:
        query = request.GET.copy()
        query["after"] = str(id_of(page[-1]))
        next_url = f"{reverse('runqueue-api:schedules')}?{query.urlencode()}"
    return JsonResponse({"schedules": [schedule_body(s) for s in page], "next": next_url})


def _text_param(name: str, value: str) -> str:
    if not value or len(value) > 255 or text_problem(value) is not None:
        raise ApiError(
            "invalid-parameter",
            f"{name} must be 1-255 characters of text.",
            extensions={"parameter": name},
        )
    return value


@api_view("GET", "DELETE")
def schedule(request: HttpRequest, caller: Caller, schedule_id: str) -> HttpResponse:
    """GET: the schedule; DELETE: 204, its ticks gone, its runs left as they are."""
    if request.method == "GET":
        return JsonResponse(schedule_body(_schedule_or_404(caller, schedule_id)))
    admission.take_quota(caller)
    owned.delete(_schedule_or_404(caller, schedule_id), actor=caller.principal)
    return HttpResponse(status=204)


@api_view("POST")
def pause_schedule(request: HttpRequest, caller: Caller, schedule_id: str) -> HttpResponse:
    """Stop firing (ticks while paused are not caught up); pausing a paused
    schedule answers 200 as the first time (a retry)."""
    return _operate(request, caller, schedule_id, pause=True)


@api_view("POST")
def resume_schedule(request: HttpRequest, caller: Caller, schedule_id: str) -> HttpResponse:
    """Fire again from now on (a one-shot whose time passed fires now);
    resuming an active schedule answers 200 (a retry)."""
    return _operate(request, caller, schedule_id, pause=False)


def _operate(
    request: HttpRequest, caller: Caller, schedule_id: str, *, pause: bool
) -> HttpResponse:
    admission.take_quota(caller)
    found = _schedule_or_404(caller, schedule_id)
    reason = _reason(parsing.parse_json(request, parsing.read_body(request), optional=True))
    try:
        if pause:
            operate.pause(found.pk, actor=caller.principal, reason=reason)
        else:
            operate.resume(found.pk, actor=caller.principal, reason=reason)
    except operate.ScheduleError:
        pass  # already paused (or not paused): the state asked for holds
    return JsonResponse(schedule_body(_found_again(caller, found)))


def _reason(body: JSON) -> str:
    """The optional ``{"reason": "..."}``; 422 if malformed."""
    if body is None:
        return ""
    reason = body.get("reason", "") if isinstance(body, dict) and set(body) <= {"reason"} else None
    if (
        not isinstance(reason, str)
        or len(reason) > parsing.MAX_PAUSE_REASON
        or text_problem(reason)
    ):
        raise validation_failed(
            [
                {
                    "pointer": "/reason",
                    "detail": f'the body is {{"reason": "<text of at most '
                    f'{parsing.MAX_PAUSE_REASON}>"}} or empty',
                }
            ]
        )
    return reason
