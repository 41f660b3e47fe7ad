"""The API's views: parse, validate, call the service layer, render.

No queue logic lives here: runs are created by ``runqueue.submit``,
cancelled by ``runqueue.cancel``, signalled by ``runqueue.signal`` and
answered by ``runqueue.deliver_input``; inbound events are recorded by
``runqueue.send_event``; everything else is a read scoped to
the caller's tenant. A run of another tenant is answered exactly like a
missing one. Every write counts against the token's quota first, and acts
only on runs the API may write (``admission``).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable

from django.db import OperationalError, connection, transaction
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.views.decorators.csrf import csrf_exempt

import runqueue
from runqueue import events, leases, reads
from runqueue.api import admission, parsing
from runqueue.api.auth import Caller, authenticate
from runqueue.api.errors import (
    ApiError,
    from_service_error,
    not_found,
    request_id,
    validation_failed,
)
from runqueue.api.openapi import document
from runqueue.api.render import (
    RunBody,
    events_url,
    run_body,
    run_url,
    session_body,
    step_body,
    steps_url,
)
from runqueue.conf import MAX_EVENTS_PAGE_SIZE, get_settings
from runqueue.errors import (
    InvalidArgument,
    InvalidTransition,
    MailboxFull,
    NotAwaitingApproval,
    RunqueueError,
    SignalTooLarge,
    ToolCallNotFound,
)
from runqueue.events import inbound as events_in
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation, ToolStatus
from runqueue.observability import tracing
from runqueue.reads import sessions
from runqueue.stream import StreamLimit, open_stream
from runqueue.stream.hub import process_hub
from runqueue.stream.session import open_session_stream, parse_session_cursor
from runqueue.stream.sse import parse_cursor
from runqueue.submission import answer as submission_answer

logger = logging.getLogger("runqueue.api")

View = Callable[..., HttpResponseBase]


def api_view(*methods: str, replica: bool = False) -> Callable[[View], View]:
    """Method check, authentication and problem+json for every error.

    CSRF is checked in ``authenticate`` for session callers only, so the view
    itself is exempt from the middleware (bearer callers carry no cookie).
    With ``replica`` the view's reads may go to RUNQUEUE["READ_DATABASE"]
    (``from_replica``); the token is verified on the primary either way, so
    a revoked token is refused at once.
    """

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, **kwargs: str) -> HttpResponseBase:
            try:
                if request.method not in methods:
                    raise ApiError(
                        "method-not-allowed",
                        f"Use {' or '.join(methods)}.",
                        headers={"Allow": ", ".join(methods)},
                    )
                caller = authenticate(request)
                if replica:
                    return from_replica(view, request, caller, kwargs)
                return view(request, caller, **kwargs)
            except ApiError as exc:
                return exc.render(request)
            except OperationalError:
                logger.exception("API database error request=%s", request_id(request))
                return ApiError(
                    "unavailable",
                    "The database is unavailable; nothing was done. Retry shortly.",
                    headers={"Retry-After": "1"},
                ).render(request)
            except Exception:
                logger.exception("API error request=%s", request_id(request))
                return ApiError(
                    "internal-error", "Something went wrong; quote the instance id."
                ).render(request)

        return wrapper

    return decorate


def from_replica(
    view: View, request: HttpRequest, caller: Caller, kwargs: dict[str, str]
) -> HttpResponseBase:
    """The view read from the replica (``runqueue.reads``), its answer
    saying how far behind past READ_LAG_WARNING_SECONDS; read again from
    the primary when the replica has no such run or session yet: a client
    reading what it has just submitted. A replica lost mid-read: the
    primary too."""
    with reads.replica_reads() as source:
        try:
            return reads.mark(view(request, caller, **kwargs), source)
        except ApiError as exc:
            if not source.replica or exc.slug != "not-found":
                raise
        except OperationalError:
            if not source.replica:
                raise
            logger.warning("Replica read failed request=%s", request_id(request), exc_info=True)
    return view(request, caller, **kwargs)


def _run_or_404(caller: Caller, run_id: str) -> Run:
    try:
        parsed = uuid.UUID(run_id)
    except ValueError:
        raise not_found() from None
    run = Run.objects.filter(tenant=caller.tenant, id=parsed).first()
    if run is None:
        raise not_found()
    return run


@api_view("POST")
def submit_run(request: HttpRequest, caller: Caller) -> HttpResponse:
    """POST /runs/: create a run (201: queued, pending in its session's line,
    or interrupting its active run), deliver input or merge (202), or replay."""
    admission.take_quota(caller)
    body = parsing.parse_json(request, parsing.read_body(request))
    key = parsing.idempotency_key(request)
    args = admission.admit(caller, body, parsing.submit_args(body))
    try:
        with tracing.incoming(request.headers.get("traceparent")):
            sub = runqueue.submit(
                **args, tenant=caller.tenant, principal=caller.principal, idempotency_key=key
            )
    except RunqueueError as exc:
        raise _mapped(exc) from exc
    # 202: no run of its own (input delivered, or the payload merged into a
    # turn not started yet); 201: a run was created (queued or pending).
    status = 202 if sub.original_outcome in ("input_delivered", "merged") else 201
    response = JsonResponse(_body_at_one_moment(sub.run), status=status)
    response["Location"] = run_url(sub.run.id)
    # What became of the message: created, enqueued, merged, steered, ...
    response["Submit-Outcome"] = sub.original_outcome
    if sub.outcome == "replayed":
        response["Idempotent-Replayed"] = "true"
    return response


def _body_at_one_moment(run: Run) -> RunBody:
    """The run's body read in one snapshot: the run, its session's line,
    its usage. Read apart, a worker's claim in between showed the run
    ``queued`` and its session's active run (itself) ``running``."""
    outermost = not connection.in_atomic_block  # else: the caller's transaction
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        now = Run.objects.filter(id=run.id).first()
        return run_body(now if now is not None else run)


@api_view("GET")
def get_run(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """GET /runs/{id}/: on the primary always. It is where ``Location``
    points after a submit, an answer or a cancel: a client reads its own write."""
    return JsonResponse(run_body(_run_or_404(caller, run_id)))


@api_view("GET", replica=True)
def run_events(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """A page of the run's events, oldest first; ``next`` continues after the last."""
    run = _run_or_404(caller, run_id)
    after = _int_param(request, "after", 0, 0, 2**63 - 1)
    limit = _int_param(
        request, "limit", get_settings().API_EVENTS_PAGE_SIZE, 1, MAX_EVENTS_PAGE_SIZE
    )
    page = list(EventLog.objects.filter(run_id=run.id, id__gt=after).order_by("id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_url = f"{events_url(run.id)}?after={page[-1].id}&limit={limit}" if more else None
    operator = _operator(caller)
    return JsonResponse(
        {"events": [events.event_body(e, operator=operator) for e in page], "next": next_url}
    )


def _operator(caller: Caller) -> bool:
    """A staff member's session: sees a lease's token and its worker's owner
    string in events, which an API token (a tenant's client) does not."""
    return caller.via == "session" and bool(getattr(caller.user, "is_staff", False))


@api_view("GET")
def run_stream(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponseBase:
    """Server-Sent Events: the run's events after ``Last-Event-ID`` (or
    ``?after=``), then each new one as it commits, until a terminal event."""
    run = _run_or_404(caller, run_id)
    header = (request.headers.get("Last-Event-ID") or "").strip()
    mark = None
    if header:
        try:
            after, mark = parse_cursor(header)
        except ValueError as exc:
            raise ApiError(
                "invalid-parameter",
                f"Last-Event-ID must be an id: of this stream ({exc}).",
                extensions={"parameter": "Last-Event-ID"},
            ) from None
    else:
        after = _int_param(request, "after", 0, 0, 2**63 - 1)
    try:
        stream = open_stream(
            run, after, _stream_owners(caller), mark=mark, operator=_operator(caller)
        )
    except StreamLimit as exc:
        raise _stream_limit_error(exc, "runs") from None
    if stream is None:
        # Finished, and the client has every event: 204 tells a browser's
        # EventSource to stop reconnecting.
        return HttpResponse(status=204)
    response = StreamingHttpResponse(stream, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def _stream_limit_error(exc: StreamLimit, what: str) -> ApiError:
    """503 when this process streams all it may, 429 when the caller does."""
    if exc.scope == "process":
        return ApiError(
            "too-many-streams",
            f"This server process streams as many {what} as it may; retry shortly.",
            headers={"Retry-After": "5"},
        )
    return ApiError(
        "stream-limit",
        f"This {exc.scope} already has {exc.limit} open event stream(s) here; close one "
        "or retry shortly.",
        headers={"Retry-After": "5"},
        extensions={"scope": exc.scope, "limit": exc.limit},
    )


def _stream_owners(caller: Caller) -> list[tuple[str, int | None]]:
    """The caller's stream bounds: its token (a session: its user) and its tenant."""
    conf = get_settings()
    who = f"token:{caller.token.pk}" if caller.token is not None else f"token:{caller.principal}"
    return [
        (who, conf.STREAM_MAX_PER_TOKEN),
        (f"tenant:{caller.tenant}", conf.STREAM_MAX_PER_TENANT),
    ]


def _writable(caller: Caller, run_id: str) -> Run:
    """A write's run: the quota counted, the run found, the write allowed."""
    admission.take_quota(caller)
    run = _run_or_404(caller, run_id)
    admission.may_write(run)
    return run


@api_view("POST")
def cancel_run(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """Cancel a run; cancelling a cancelled run again answers 200 (a retry)."""
    run = _writable(caller, run_id)
    body = parsing.parse_json(request, parsing.read_body(request), optional=True)
    reason = parsing.cancel_reason(body)
    cascade = parsing.cancel_cascade(body)
    try:
        run = runqueue.cancel(run.id, reason=reason, actor=caller.principal, cascade=cascade)
    except InvalidTransition as exc:
        if exc.status != RunStatus.CANCELLED:
            raise _mapped(exc) from exc
        run.refresh_from_db()
    except RunqueueError as exc:
        raise _mapped(exc) from exc
    return JsonResponse(run_body(run))


@api_view("POST")
def pause_run(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """Pause a run (``{"tree": true}``: and every run below it); pausing a
    paused run again answers 200 (a retry). 409 for a run that ended."""
    return _pause_or_resume(request, caller, run_id, runqueue.pause_run)


@api_view("POST")
def resume_run(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """Resume a paused run (``{"tree": true}``: and every run below it); a
    run not paused answers 200 as it is."""
    return _pause_or_resume(request, caller, run_id, runqueue.resume_run)


def _pause_or_resume(
    request: HttpRequest, caller: Caller, run_id: str, operation: Callable[..., object]
) -> HttpResponse:
    run = _writable(caller, run_id)
    body = parsing.parse_json(request, parsing.read_body(request), optional=True)
    reason, tree = parsing.pause_request(body)
    try:
        operation(run.id, actor=caller.principal, reason=reason, tree=tree)
    except RunqueueError as exc:
        raise _mapped(exc) from exc
    run.refresh_from_db()
    return JsonResponse(run_body(run))


@api_view("POST")
def signal_run(request: HttpRequest, caller: Caller, run_id: str, name: str) -> HttpResponse:
    """Send signal ``name`` to a run of the caller's tenant, the body (any
    JSON, or empty) its data: 202 with ``delivered`` (the run was waiting
    for it and is queued again) or ``kept`` (in its mailbox for the wait)."""
    run = _writable(caller, run_id)
    data = parsing.parse_json(request, parsing.read_body(request), optional=True)
    if (problem := leases.signal_name_problem(name)) is not None:
        raise validation_failed([{"pointer": "", "detail": f"the signal's name {problem}"}])
    try:
        delivery = runqueue.signal(run.id, name, data)
    except InvalidTransition as exc:
        raise ApiError(
            "run-not-signallable",
            f"The run is {exc.status}; only a run that is not finished takes a signal.",
            extensions={"run_status": exc.status},
        ) from exc
    except SignalTooLarge as exc:
        raise ApiError(
            "signal-too-large",
            f"A signal's data is at most {exc.limit} bytes as JSON; this is {exc.size}.",
            extensions={"max_bytes": exc.limit},
        ) from exc
    except MailboxFull as exc:
        raise ApiError(
            "mailbox-full",
            f"The run already keeps {exc.limit} signals no wait has taken; it takes more once "
            "a wait takes one, or the run finishes.",
            extensions={"max_kept": exc.limit},
        ) from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": "", "detail": str(exc)}]) from exc
    except RunqueueError as exc:
        raise _mapped(exc) from exc
    run.refresh_from_db()
    return JsonResponse({"delivery": delivery, "run": run_body(run)}, status=202)


@api_view("POST")
def answer_run(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """Answer a run waiting for the user (``ctx.ask_user``), whatever its
    session: the body (any JSON, or empty for null) is its input, as the
    payload of a submit to its session would be. 202 with the run, queued
    again; 409 when it does not wait for the user. An Idempotency-Key
    (optional) makes a retry safe, as on a submit: the same answer again is
    the first response, ``Idempotent-Replayed: true``."""
    run = _writable(caller, run_id)
    data = parsing.parse_json(request, parsing.read_body(request), optional=True)
    key = parsing.idempotency_key(request) if "HTTP_IDEMPOTENCY_KEY" in request.META else None
    try:
        answered = submission_answer.answer(
            run.id, data, tenant=caller.tenant, principal=caller.principal, idempotency_key=key
        )
    except InvalidTransition as exc:
        raise ApiError(
            "run-not-waiting-for-user",
            f"The run is {exc.status}; only a run waiting for the user takes an answer "
            "(one answer per question).",
            extensions={"run_status": exc.status},
        ) from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": "", "detail": str(exc)}]) from exc
    except RunqueueError as exc:
        raise _mapped(exc) from exc
    response = JsonResponse(run_body(answered.run), status=202)
    response["Location"] = run_url(answered.run.id)
    if answered.outcome == "replayed":
        response["Idempotent-Replayed"] = "true"
    return response


@api_view("GET", replica=True)
def run_steps(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """A page of the run's recorded steps in order (model requests, tool
    calls with their approvals, spawns); ``next`` continues after the last."""
    run = _run_or_404(caller, run_id)
    after = _int_param(request, "after", -1, -1, 2**31 - 1)
    limit = _int_param(
        request, "limit", get_settings().API_EVENTS_PAGE_SIZE, 1, MAX_EVENTS_PAGE_SIZE
    )
    page = list(ToolInvocation.objects.filter(run_id=run.id, seq__gt=after).order_by("seq"))[
        : limit + 1
    ]
    more = len(page) > limit
    page = page[:limit]
    next_url = f"{steps_url(run.id)}?after={page[-1].seq}&limit={limit}" if more else None
    return JsonResponse({"steps": [step_body(s) for s in page], "next": next_url})


@api_view("POST")
def decide_tool(request: HttpRequest, caller: Caller, run_id: str, seq: str) -> HttpResponse:
    """Decide tool call ``seq`` of a run, which awaits approval (``decision``:
    approve, edit with ``arguments``, reject with a ``reason``, respond
    with a ``result``): 200 with the call and the run. The same decision
    again (a client's retry, with or without its Idempotency-Key) answers
    as the first did, ``Idempotent-Replayed: true``; another is 409."""
    run = _writable(caller, run_id)
    if not (seq.isascii() and seq.isdigit() and len(seq) <= 10 and int(seq) < 2**31):
        raise not_found()
    number = int(seq)
    body = parsing.parse_json(request, parsing.read_body(request))
    decision = parsing.tool_decision(body)
    before = ToolInvocation.objects.filter(run_id=run.id, seq=number).first()
    try:
        step = runqueue.decide_tool(run.id, number, actor=caller.principal, **decision)
    except ToolCallNotFound as exc:
        raise not_found() from exc
    except NotAwaitingApproval as exc:
        decided = exc.decision.get("decision") if isinstance(exc.decision, dict) else None
        said = f": it was decided already ({decided})." if decided else "."
        raise ApiError(
            "tool-not-awaiting-approval",
            f"Tool call #{number} does not await approval{said}",
            extensions={"tool_status": exc.status},
        ) from exc
    except InvalidTransition as exc:
        raise ApiError(
            "run-finished",
            f"The run is {exc.status}; a finished run takes no decision.",
            extensions={"run_status": exc.status},
        ) from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": f"/{exc.name}", "detail": str(exc)}]) from exc
    except RunqueueError as exc:
        raise _mapped(exc) from exc
    run.refresh_from_db()
    response = JsonResponse({"step": step_body(step), "run": run_body(run)})
    if before is not None and before.status != ToolStatus.AWAITING_APPROVAL:
        response["Idempotent-Replayed"] = "true"
    return response


@api_view("POST")
def receive_event(request: HttpRequest, caller: Caller, name: str) -> HttpResponse:
    """Record inbound event ``name`` for the caller's tenant: 201 with the
    runs its triggers started; the same key again (a repeated delivery)
    200 with the first answer, ``Idempotent-Replayed: true``. Checked in
    order: the quota, the name (``API_EVENTS``), the size
    (``EVENT_MAX_BYTES``), the signature (``EVENT_VERIFIERS``) on the raw
    body, the JSON object, the key. Nothing is written unless all pass."""
    admission.take_quota(caller)
    conf = get_settings()
    if name not in conf.API_EVENTS:
        raise ApiError("event-not-accepted", f"Events named {name[:255]!r} are not accepted here.")
    raw = parsing.read_body(request, conf.EVENT_MAX_BYTES)
    if not events_in.verify(name, request.headers, raw):
        raise ApiError(
            "event-signature-invalid",
            "The event's signature is missing or does not match its body; nothing was recorded.",
        )
    body = parsing.parse_json(request, raw)
    if not isinstance(body, dict):
        raise validation_failed([{"pointer": "", "detail": "an event's body is a JSON object"}])
    key = parsing.event_key(request, name, body)
    try:
        received = runqueue.send_event(
            name, body, key=key, tenant=caller.tenant, principal=caller.principal
        )
    except events_in.EventKeyReused as exc:
        raise ApiError(
            "idempotency-key-reused",
            f"Event {name!r} with key {key!r} was received with other data.",
        ) from exc
    except events_in.TriggerFailed as exc:
        logger.error("Event %r not recorded: %s request=%s", name, exc, request_id(request))
        raise ApiError(
            "event-trigger-failed",
            f"Trigger {exc.trigger} could not start its run; nothing was recorded. "
            "Retry once the trigger is fixed.",
        ) from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": "", "detail": str(exc)}]) from exc
    event = received.event
    response = JsonResponse(
        {
            "name": event.name,
            "key": event.key,
            "received_at": event.received_at.isoformat(),
            "started": [str(run) for run in received.started],
            "started_runs": [run_url(run) for run in received.started],
        },
        status=200 if received.replayed else 201,
    )
    if received.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@api_view("GET", replica=True)
def get_session(request: HttpRequest, caller: Caller, session_id: str) -> HttpResponse:
    """A session of the caller's tenant (``runqueue.session``): its newest
    turns (``limit``) or those before ``before`` (the cursor in the previous
    page's ``links.older``), its line and usage; another tenant's is 404."""
    limit = _int_param(request, "limit", sessions.DEFAULT_LIMIT, 1, sessions.MAX_LIMIT)
    before = request.GET.get("before")
    try:
        read = sessions.session(session_id, tenant=caller.tenant, limit=limit, before=before)
    except InvalidArgument as exc:
        raise ApiError(
            "invalid-parameter",
            "before must be the cursor in a page's links.older.",
            extensions={"parameter": exc.name},
        ) from None
    if read is None:
        raise not_found()
    return JsonResponse(session_body(read, limit))


@api_view("GET")
def session_stream(request: HttpRequest, caller: Caller, session_id: str) -> HttpResponseBase:
    """Server-Sent Events: every turn's events of a session of the caller's
    tenant, in order, each naming its run; after ``Last-Event-ID`` (or
    ``?after=``, the same cursor) across turns, then each new one as it
    commits, the next turns' too (``runqueue.stream.session``)."""
    if sessions.session_unstorable(session_id) or not (
        Run.objects.filter(tenant=caller.tenant, session_id=session_id).exists()
    ):
        raise not_found()
    header = (request.headers.get("Last-Event-ID") or "").strip()
    raw, name = (header, "Last-Event-ID") if header else (request.GET.get("after"), "after")
    cursor = None
    if raw:
        try:
            cursor = parse_session_cursor(raw)
        except ValueError as exc:
            raise ApiError(
                "invalid-parameter",
                f"{name} must be an id of this stream ({exc}).",
                extensions={"parameter": name},
            ) from None
    try:
        stream = open_session_stream(
            process_hub(),
            caller.tenant,
            session_id,
            cursor,
            _stream_owners(caller),
            operator=_operator(caller),
        )
    except StreamLimit as exc:
        raise _stream_limit_error(exc, "runs and sessions") from None
    response = StreamingHttpResponse(stream, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


@csrf_exempt
def openapi_json(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3 document (public: it describes, it reveals no data)."""
    if request.method not in ("GET", "HEAD"):
        return ApiError("method-not-allowed", "Use GET.", headers={"Allow": "GET, HEAD"}).render(
            request
        )
    return JsonResponse(document(), json_dumps_params={"indent": 1})


def _mapped(exc: RunqueueError) -> ApiError:
    mapped = from_service_error(exc, run_url=run_url)
    if mapped is None:
        raise exc
    return mapped


def _int_param(request: HttpRequest, name: str, default: int, low: int, high: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    return _int_value(name, raw, low, high)


def _int_value(name: str, raw: str, low: int, high: int) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19 and low <= int(raw) <= high):
        raise ApiError(
            "invalid-parameter",
            f"{name} must be an integer from {low} to {high}.",
            extensions={"parameter": name},
        )
    return int(raw)
