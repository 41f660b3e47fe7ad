"""``submit``, ``submit_in_transaction`` and ``submit_many``.

The order is fixed (ADR-0004 §9, DESIGN "Submit"): the idempotency lookup
comes first (``runqueue.submission.keys``), so a client retrying the request
that created the session's live run gets that run back, not a conflict.
Then the session decides (``runqueue.submission.routing``); otherwise a new
run is created. What a submission may hold is ``runqueue.submission.rules``'s
to say; the statement that writes new runs is
``runqueue.submission.inserts``'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from itertools import batched
from operator import attrgetter

from django.db import IntegrityError, OperationalError, connection, transaction

from runqueue.db import constraint_name, sqlstate
from runqueue.errors import (
    ActiveRunConflict,
    IdempotencyInProgress,
    InvalidSubmission,
    RunqueueError,
    SessionQueueFull,
)
from runqueue.leases.base import moved_by_another
from runqueue.models import (
    PriorityClass,
)
from runqueue.observability import tracing
from runqueue.submission import fields as submission_fields
from runqueue.submission.inserts import KEY_CONSTRAINT, SESSION_CONSTRAINT, insert_plain
from runqueue.submission.keys import (
    Retry,
    Submission,
    replay_request,
    request_hash_of,
    set_lock_timeout,
)
from runqueue.submission.routing import (
    create_run,
    debounced_turn,
    insert_traced,
    route_session,
)
from runqueue.submission.rules import (
    BatchChecks,
    CheckedSubmission,
    check_submission,
    require,
)
from runqueue.types import JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitRequest:
    """One run for ``submit_many``: ``submit``'s keyword arguments."""

    kind: str
    payload: JSON = None
    session_id: str | None = None
    tenant: str = "default"
    principal: str = ""
    priority: int = PriorityClass.INTERACTIVE
    idempotency_key: str | None = None
    scheduled_for: dt.datetime | None = None
    max_attempts: int | None = None
    concurrency_key: str | None = None
    budget: tuple[str, int] | None = None
    start_within: float | dt.timedelta | None = None
    max_duration: float | dt.timedelta | None = None
    spend_cap: float | Decimal | None = None
    on_busy: str | None = None
    debounce: float | dt.timedelta | None = None
    webhook: str | None = None


#: ``submit_many`` writes this many runs per statement.
SUBMIT_MANY_CHUNK = 1000
#: ... and this many when it pipelines (a fan-out without keys or sessions):
#: chunks small enough that the server inserts one while the next is made.
PIPELINE_CHUNK = 100


def submit(
    *,
    kind: str,
    payload: JSON = None,
    session_id: str | None = None,
    tenant: str = "default",
    principal: str = "",
    priority: int = PriorityClass.INTERACTIVE,
    idempotency_key: str | None = None,
    scheduled_for: dt.datetime | None = None,
    max_attempts: int | None = None,
    concurrency_key: str | None = None,
    budget: tuple[str, int] | None = None,
    start_within: float | dt.timedelta | None = None,
    max_duration: float | dt.timedelta | None = None,
    spend_cap: float | Decimal | None = None,
    on_busy: str | None = None,
    debounce: float | dt.timedelta | None = None,
    webhook: str | None = None,
) -> Submission:
    """Submit a run, or deliver input to the session's waiting run.

    ``concurrency_key`` (default: the tenant) names the runs that share a
    concurrency cap per class (``runqueue.capacity.concurrency``). ``budget`` (key,
    tokens) declares the run's first model call: it is claimed only once
    one request and ``tokens`` are reserved on that budget
    (``runqueue.capacity.budgets``; ignored by an input delivery). ``start_within``
    (seconds or a timedelta): a run not claimed that long after it is due
    is cancelled as expired; ``max_duration``: an attempt running that long
    is cancelled and the run fails (docs/decisions/sessions.md, "Run deadlines";
    defaults: the kind's ``@handler`` options, then ``RUNQUEUE``'s).
    ``spend_cap``: once the cost the run and its descendants record
    (``ctx.record_usage``) reaches it, the tree's live runs are cancelled,
    reason ``spend_cap`` (docs/decisions/run-trees.md, "Usage and cost").
    ``on_busy`` (default ``RUNQUEUE["SESSION_ON_BUSY"]``, ``"reject"``):
    what a submit to a session whose active run is busy does: ``reject``
    (ActiveRunConflict), ``enqueue`` (a pending turn, queued when the
    active run ends), ``interrupt`` (the active run is cancelled and this
    run starts now, ``ctx.interrupted`` telling it what the old run did),
    ``rollback`` (the same without ``ctx.interrupted``) or ``merge`` (the
    payload joins the session's turn not started yet, else ``enqueue``);
    docs/decisions/sessions.md, "Busy sessions: on_busy".

    Raises InvalidSubmission or UnknownKind (nothing written),
    ActiveRunConflict, SessionQueueFull, IdempotencyConflict or
    IdempotencyInProgress.
    """
    checked = check_submission(
        kind=kind,
        payload=payload,
        session_id=session_id,
        tenant=tenant,
        principal=principal,
        priority=priority,
        idempotency_key=idempotency_key,
        scheduled_for=scheduled_for,
        max_attempts=max_attempts,
        concurrency_key=concurrency_key,
        budget=budget,
        start_within=start_within,
        max_duration=max_duration,
        spend_cap=spend_cap,
        on_busy=on_busy,
        debounce=debounce,
        webhook=webhook,
    )
    return _submit(require(checked), durable=True)


def submit_in_transaction(
    *,
    kind: str,
    payload: JSON = None,
    session_id: str | None = None,
    tenant: str = "default",
    principal: str = "",
    priority: int = PriorityClass.INTERACTIVE,
    scheduled_for: dt.datetime | None = None,
    max_attempts: int | None = None,
    concurrency_key: str | None = None,
    budget: tuple[str, int] | None = None,
    start_within: float | dt.timedelta | None = None,
    max_duration: float | dt.timedelta | None = None,
    spend_cap: float | Decimal | None = None,
    on_busy: str | None = None,
    debounce: float | dt.timedelta | None = None,
    webhook: str | None = None,
) -> Submission:
    """``submit()`` without an idempotency key, inside the caller's transaction.

    The run (and its NOTIFY) exist only once the caller commits, and vanish
    if it rolls back: the django.tasks contract (``enqueue`` in an atomic
    block, as django-tasks-db does). A keyed submit needs a transaction of its
    own (its lock timeout, its same-key retry), so it is not offered here.
    """
    checked = check_submission(
        kind=kind,
        payload=payload,
        session_id=session_id,
        tenant=tenant,
        principal=principal,
        priority=priority,
        scheduled_for=scheduled_for,
        max_attempts=max_attempts,
        concurrency_key=concurrency_key,
        budget=budget,
        start_within=start_within,
        max_duration=max_duration,
        spend_cap=spend_cap,
        on_busy=on_busy,
        debounce=debounce,
        webhook=webhook,
    )
    return _submit(require(checked), durable=False)


def _submit(request: CheckedSubmission, *, durable: bool) -> Submission:
    request_hash = request_hash_of(request) if request.idempotency_key is not None else ""
    if request.idempotency_key is None and request.session_id is None:
        # Nothing to look up and nothing to collide with: one statement.
        with _statement_transaction(durable=durable, savepoint=False):
            (run,) = insert_traced([request], [request_hash])
        return Submission(run=run, outcome="created", original_outcome="created")
    if request.on_busy == "debounce":
        return _route(request, request_hash, durable=durable)  # a new turn waits a window
    # Optimistic: no key yet and no active run in the session is the common
    # case, written in one statement; a unique violation means one of them
    # exists, and the routing below (the idempotency lookup first) decides.
    try:
        with _statement_transaction(durable=durable, savepoint=True):
            (run,) = insert_traced([request], [request_hash])
        return Submission(run=run, outcome="created", original_outcome="created")
    except IntegrityError as exc:
        if constraint_name(exc) not in (SESSION_CONSTRAINT, KEY_CONSTRAINT):
            raise
    except OperationalError as exc:
        if sqlstate(exc) == "55P03":  # lock_not_available
            raise IdempotencyInProgress(request.idempotency_key or "") from exc
        raise
    return _route(request, request_hash, durable=durable)


@contextmanager
def _statement_transaction(*, durable: bool, savepoint: bool) -> Iterator[None]:
    """Where a one-statement submit runs: in autocommit it is a transaction
    of its own (no BEGIN and COMMIT round trips); ``durable`` refuses a
    caller's transaction as ``atomic(durable=True)`` does; otherwise it joins
    the caller's, in a savepoint if a unique violation must not abort it."""
    if not connection.in_atomic_block:
        yield
    elif durable:
        with transaction.atomic(durable=True):
            yield
    elif savepoint:
        with transaction.atomic():
            yield
    else:
        yield


#: Times a submit routes again because the session's active run ended
#: while it waited for that run's lock: each is a turn of the session done
#: meanwhile (a busy conversation with a fast worker), never a loop alone.
MOVED_ROUTES = 50


def _route(request: CheckedSubmission, request_hash: str, *, durable: bool) -> Submission:
    # A same-key submit that committed between our lookup and our key insert
    # makes us start over once: the lookup then finds its key.
    taken = moved = 0
    while True:
        try:
            return _submit_once(request, request_hash, durable=durable)
        except _Moved as retry:
            moved += 1
            if moved >= MOVED_ROUTES:
                raise retry.error from None
        except Retry:
            taken += 1
            if taken >= 3:
                raise IdempotencyInProgress(request.idempotency_key or "") from None


class _Moved(Retry):
    """The session's active run moved (it ended) while this submit waited
    for its row: route again; ``error`` is what PostgreSQL said."""

    def __init__(self, error: OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


def _submit_once(request: CheckedSubmission, request_hash: str, *, durable: bool) -> Submission:
    try:
        with transaction.atomic(durable=durable):
            if request.idempotency_key is not None:
                set_lock_timeout()
                replay = replay_request(request, request_hash)
                if replay is not None:
                    return replay
            if request.session_id is not None:
                try:
                    routed = route_session(request, request_hash)
                except (ActiveRunConflict, SessionQueueFull):
                    # The session's run may be the one a same-key request just
                    # committed: a statement's fresh snapshot now shows its key.
                    replay = (
                        replay_request(request, request_hash)
                        if request.idempotency_key is not None
                        else None
                    )
                    if replay:
                        return replay
                    raise
                if routed is not None:
                    return routed
            turn = None
            if request.on_busy == "debounce" and request.debounce is not None:
                request, turn = debounced_turn(request)  # an idle session: the turn waits a window
            run = create_run(request, request_hash, turn=turn)
            return Submission(run=run, outcome="created", original_outcome="created")
    except OperationalError as exc:
        if moved_by_another(exc) or sqlstate(exc) == "40P01":
            # The session's run finished (moved to a finished day) while we
            # waited for its lock: route again; it is no longer active. (A
            # deadlock: an interrupt's cascade met a child's join.)
            raise _Moved(exc) from exc
        if sqlstate(exc) == "55P03":  # lock_not_available
            raise IdempotencyInProgress(request.idempotency_key or "") from exc
        raise


def submit_many(requests: Iterable[SubmitRequest]) -> list[Submission]:
    """Submit many runs at once (an agent's fan-out): one ``Submission`` per
    request, in order, all or nothing.

    Each request follows ``submit``'s rules (its key replays or conflicts,
    one active run per session). A call without keys or sessions is
    written ``PIPELINE_CHUNK`` runs to a statement, each statement sent
    while the next chunk is checked; otherwise ``SUBMIT_MANY_CHUNK`` to a
    statement once all are checked, the requests of a chunk that meets a
    taken key or session one by one, in the same transaction. An error
    raised for a request (InvalidSubmission, UnknownKind,
    ActiveRunConflict, IdempotencyConflict, ...) carries its position as
    ``.index`` and nothing of the call is written. Idle workers are woken
    once, on commit.
    """
    items = list(requests)
    checks = BatchChecks(submission_fields.NAMES)
    if not any(
        getattr(item, "idempotency_key", None) is not None
        or getattr(item, "session_id", None) is not None
        for item in items
    ):
        # A fan-out: no key or session can be taken, so nothing to route.
        with transaction.atomic(durable=True):
            runs = insert_plain(
                batched(_checked(items, checks), PIPELINE_CHUNK),
                traceparent=tracing.current_traceparent(),
            )
        return [Submission(run=run, outcome="created", original_outcome="created") for run in runs]
    checked = list(_checked(items, checks))
    out: list[Submission] = []
    with transaction.atomic(durable=True):
        for start in range(0, len(checked), SUBMIT_MANY_CHUNK):
            chunk = checked[start : start + SUBMIT_MANY_CHUNK]
            hashes = [request_hash_of(r) if r.idempotency_key is not None else "" for r in chunk]
            try:
                with transaction.atomic():
                    runs = insert_traced(chunk, hashes)
            except (IntegrityError, OperationalError) as exc:
                taken = constraint_name(exc) in (SESSION_CONSTRAINT, KEY_CONSTRAINT)
                if not taken and sqlstate(exc) != "55P03":
                    raise
                # A key or a session is taken, or a key is in flight (perhaps
                # by another request of this call): each request through
                # submit's routing, in order.
                for offset, (request, request_hash) in enumerate(zip(chunk, hashes, strict=True)):
                    with _at(start + offset):
                        out.append(_submit_routed(request, request_hash))
                continue
            out.extend(
                Submission(run=run, outcome="created", original_outcome="created") for run in runs
            )
    return out


def _checked(items: Iterable[object], checks: BatchChecks) -> Iterator[CheckedSubmission]:
    """Each request checked, in order, as it is asked for; an error tagged
    with its request's position (the requests before it all passed)."""
    values = attrgetter(*submission_fields.NAMES)
    index = 0
    try:
        for index, item in enumerate(items):  # noqa: B007 (read by the handler)
            if not isinstance(item, SubmitRequest):
                raise InvalidSubmission(
                    "requests", f"expected SubmitRequest, got {type(item).__name__}"
                )
            yield checks.require(values(item))
    except RunqueueError as exc:
        _tag(exc, index)
        raise


@contextmanager
def _at(index: int) -> Iterator[None]:
    """Tag an error raised for ``submit_many``'s request ``index``."""
    try:
        yield
    except RunqueueError as exc:
        _tag(exc, index)
        raise


def _tag(exc: RunqueueError, index: int) -> None:
    exc.index = index  # type: ignore[attr-defined]
    exc.add_note(f"submit_many: request #{index}")


def _submit_routed(request: CheckedSubmission, request_hash: str) -> Submission:
    if request.idempotency_key is None and request.session_id is None:
        (run,) = insert_traced([request], [request_hash])
        return Submission(run=run, outcome="created", original_outcome="created")
    return _route(request, request_hash, durable=False)
