"""``/api/runs/``: submit a run, read it, and cancel, pause, resume,
signal or answer it.

No queue logic lives here: runs are created by ``runqueue.submit``,
cancelled by ``runqueue.cancel``, signalled by ``runqueue.signal`` and
answered by ``runqueue.deliver_input``; everything else is a read scoped to
the caller's tenant. A run of another tenant is answered exactly like a
missing one (``run_or_404``, which a run's other endpoints use too). Every
write counts against the token's quota first, and acts only on runs the API
may write (``writable``, ``admission``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse

import runqueue
from runqueue import leases
from runqueue.api import admission, parsing
from runqueue.api.auth import Caller
from runqueue.api.endpoint import api_view, mapped
from runqueue.api.errors import ApiError, not_found, refused_in_status, validation_failed
from runqueue.api.render import RunBody, run_body, run_url
from runqueue.errors import (
    InvalidArgument,
    InvalidTransition,
    MailboxFull,
    RunqueueError,
    SignalTooLarge,
)
from runqueue.models import Run, RunStatus
from runqueue.observability import tracing
from runqueue.submission.answer import answer


def run_or_404(caller: Caller, run_id: str) -> Run:
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
        raise mapped(exc) from exc
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
    return JsonResponse(run_body(run_or_404(caller, run_id)))


def writable(caller: Caller, run_id: str) -> Run:
    """A write's run: the quota counted, the run found, the write allowed."""
    admission.take_quota(caller)
    run = run_or_404(caller, run_id)
    admission.may_write(run)
    return run


@api_view("POST")
def cancel_run(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """Cancel a run; cancelling a cancelled run again answers 200 (a retry)."""
    run = writable(caller, run_id)
    body = parsing.parse_json(request, parsing.read_body(request), optional=True)
    reason = parsing.cancel_reason(body)
    cascade = parsing.cancel_cascade(body)
    try:
        run = runqueue.cancel(run.id, reason=reason, actor=caller.principal, cascade=cascade)
    except InvalidTransition as exc:
        if exc.status != RunStatus.CANCELLED:
            raise mapped(exc) from exc
        run.refresh_from_db()
    except RunqueueError as exc:
        raise mapped(exc) from exc
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
    run = writable(caller, run_id)
    body = parsing.parse_json(request, parsing.read_body(request), optional=True)
    reason, tree = parsing.pause_request(body)
    try:
        operation(run.id, actor=caller.principal, reason=reason, tree=tree)
    except RunqueueError as exc:
        raise mapped(exc) from exc
    run.refresh_from_db()
    return JsonResponse(run_body(run))


@api_view("POST")
def signal_run(request: HttpRequest, caller: Caller, run_id: str, name: str) -> HttpResponse:
    """Send signal ``name`` to a run of the caller's tenant, the body (any
    JSON, or empty) its data: 202 with ``delivered`` (the run was waiting
    for it and is queued again) or ``kept`` (in its mailbox for the wait)."""
    run = writable(caller, run_id)
    data = parsing.parse_json(request, parsing.read_body(request), optional=True)
    if (problem := leases.signal_name_problem(name)) is not None:
        raise validation_failed([{"pointer": "", "detail": f"the signal's name {problem}"}])
    try:
        delivery = runqueue.signal(run.id, name, data)
    except InvalidTransition as exc:
        raise refused_in_status(
            "run-not-signallable", exc, "only a run that is not finished takes a signal."
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
        raise mapped(exc) from exc
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
    run = writable(caller, run_id)
    data = parsing.parse_json(request, parsing.read_body(request), optional=True)
    key = parsing.idempotency_key(request) if "HTTP_IDEMPOTENCY_KEY" in request.META else None
    try:
        answered = answer(
            run.id, data, tenant=caller.tenant, principal=caller.principal, idempotency_key=key
        )
    except InvalidTransition as exc:
        raise refused_in_status(
            "run-not-waiting-for-user",
            exc,
            "only a run waiting for the user takes an answer (one answer per question).",
        ) from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": "", "detail": str(exc)}]) from exc
    except RunqueueError as exc:
        raise mapped(exc) from exc
    response = JsonResponse(run_body(answered.run), status=202)
    response["Location"] = run_url(answered.run.id)
    if answered.outcome == "replayed":
        response["Idempotent-Replayed"] = "true"
    return response
