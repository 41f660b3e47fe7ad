"""Submission: idempotency keys, then session routing.

The order is fixed (ADR-0004 §9, DESIGN "Submit"): the idempotency lookup
comes first, so a client retrying the request that created the session's
live run gets that run back, not a conflict. Then the session decides: a run
waiting for the user receives this request as input; a busy one (queued,
running, waiting) is what ``on_busy`` says: a conflict (``reject``), a
pending turn in line behind it (``enqueue``), a new run that cancels it
(``interrupt``, ``rollback``), or the payload joined to a turn not started
yet (``merge``); otherwise a new run is created (docs/decisions/sessions.md, "Busy
sessions: on_busy"). Concurrent submits are resolved by the database's
unique constraints and the active run's row lock, never by a Python check.
What a submission may hold is ``runqueue.submission_rules``'s to say; the
statement that writes new runs is ``runqueue.inserts``'s. A spawn's names
(``spawn``, ``child_priority``, ``SPAWN_TOOL``, ``payload_digest``) and
``turn_payloads`` are still importable from here, where they were first.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    Max,
    Min,
    Q,
    QuerySet,
)
from django.db.models.functions import Now

from runqueue import events, leases, submission_fields
from runqueue.clock import db_now
from runqueue.conf import get_settings
from runqueue.db import constraint_name, sqlstate
from runqueue.errors import (
    ActiveRunConflict,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidSubmission,
    InvalidTransition,
    RunqueueError,
    SessionQueueFull,
)
from runqueue.inserts import KEY_CONSTRAINT, SESSION_CONSTRAINT, insert_runs
from runqueue.leases import PAYLOAD_DIGEST as PAYLOAD_DIGEST
from runqueue.leases import SPAWN_TOOL as SPAWN_TOOL
from runqueue.leases import payload_digest as payload_digest
from runqueue.leases.base import moved_by_another
from runqueue.models import (
    ACTIVE_STATUSES,
    IdempotencyKey,
    PriorityClass,
    Run,
    RunStatus,
    SubmitOutcome,
)
from runqueue.observability import tracing
from runqueue.spawning import child_priority as child_priority
from runqueue.spawning import spawn as spawn
from runqueue.sql import set_config
from runqueue.submission_rules import (
    BatchChecks,
    CheckedSubmission,
    check_submission,
    idempotency_key_problem,
    require,
)
from runqueue.turns import PAYLOADS, STEER, joined
from runqueue.turns import turn_payloads as turn_payloads
from runqueue.types import JSON

Outcome = Literal[
    "created",
    "replayed",
    "input_delivered",
    "enqueued",
    "merged",
    "interrupted",
    "rolled_back",
    "steered",
]
#: The outcomes a key's row records, as a Submission names them.
_KEY_OUTCOMES: dict[str, Outcome] = {
    SubmitOutcome.CREATED: "created",
    SubmitOutcome.INPUT_DELIVERED: "input_delivered",
    SubmitOutcome.ENQUEUED: "enqueued",
    SubmitOutcome.MERGED: "merged",
    SubmitOutcome.INTERRUPTED: "interrupted",
    SubmitOutcome.ROLLED_BACK: "rolled_back",
    SubmitOutcome.STEERED: "steered",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """What a submit did: ``outcome`` is created, replayed, input_delivered,
    or what ``on_busy`` did with a busy session: enqueued (``run`` is a
    pending turn), merged (``run`` is the turn the payload joined),
    interrupted or rolled_back (``run`` is the new run, queued; the active
    run it replaced is cancelled).

    For a replay, ``original_outcome`` says what the first request did, so
    an API can answer as it did then.
    """

    run: Run
    outcome: Outcome
    original_outcome: Outcome


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


def _hash(request: CheckedSubmission) -> str:
    """SHA-256 of the canonical request (``submission_fields.canonical``):
    sorted keys, no whitespace, UTC times."""
    text = json.dumps(
        submission_fields.canonical(request),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


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
    concurrency cap per class (``runqueue.concurrency``). ``budget`` (key,
    tokens) declares the run's first model call: it is claimed only once
    one request and ``tokens`` are reserved on that budget
    (``runqueue.budgets``; ignored by an input delivery). ``start_within``
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
    request_hash = _hash(request) if request.idempotency_key is not None else ""
    if request.idempotency_key is None and request.session_id is None:
        # Nothing to look up and nothing to collide with: one statement.
        with _statement_transaction(durable=durable, savepoint=False):
            (run,) = _insert_runs([request], [request_hash])
        return Submission(run=run, outcome="created", original_outcome="created")
    if request.on_busy == "debounce":
        return _route(request, request_hash, durable=durable)  # a new turn waits a window
    # Optimistic: no key yet and no active run in the session is the common
    # case, written in one statement; a unique violation means one of them
    # exists, and the routing below (the idempotency lookup first) decides.
    try:
        with _statement_transaction(durable=durable, savepoint=True):
            (run,) = _insert_runs([request], [request_hash])
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
        except _Retry:
            taken += 1
            if taken >= 3:
                raise IdempotencyInProgress(request.idempotency_key or "") from None


class _Retry(Exception):
    pass


class _Moved(_Retry):
    """The session's active run moved (it ended) while this submit waited
    for its row: route again; ``error`` is what PostgreSQL said."""

    def __init__(self, error: OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


def _submit_once(request: CheckedSubmission, request_hash: str, *, durable: bool) -> Submission:
    try:
        with transaction.atomic(durable=durable):
            if request.idempotency_key is not None:
                _set_lock_timeout()
                replay = _replay(request, request_hash)
                if replay is not None:
                    return replay
            if request.session_id is not None:
                try:
                    routed = _route_session(request, request_hash)
                except (ActiveRunConflict, SessionQueueFull):
                    # The session's run may be the one a same-key request just
                    # committed: a statement's fresh snapshot now shows its key.
                    replay = (
                        _replay(request, request_hash)
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
                request, turn = _debounced(request)  # an idle session: the turn waits a window
            run = _create_run(request, request_hash, turn=turn)
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


def _set_lock_timeout() -> None:
    set_config(connection, "lock_timeout", f"{get_settings().SUBMIT_LOCK_TIMEOUT_MS}ms")


def _replay(request: CheckedSubmission, request_hash: str) -> Submission | None:
    """The original run for a known key, IdempotencyConflict, or None."""
    return _replay_key(
        request.tenant, request.principal, request.idempotency_key or "", request_hash
    )


def _replay_key(tenant: str, principal: str, key: str, request_hash: str) -> Submission | None:
    """The original run for a known key (a submit's or an answer's: one
    store), IdempotencyConflict for another request, or None."""
    found = (
        IdempotencyKey.objects.filter(tenant=tenant, principal=principal, key=key)
        .select_related("run")
        .annotate(expired=ExpressionWrapper(Q(expires_at__lte=Now()), BooleanField()))
        .first()
    )
    if found is None:
        return None
    if found.expired:
        found.delete()  # expired: the key is free again
        return None
    if found.request_hash != request_hash:
        raise IdempotencyConflict(key)
    original = _KEY_OUTCOMES.get(found.outcome, "created")
    return Submission(run=found.run, outcome="replayed", original_outcome=original)


def _route_session(request: CheckedSubmission, request_hash: str) -> Submission | None:
    """What the session's active run makes of this submit: input delivery
    if it waits for the user, else what ``on_busy`` says; None when the
    session has no active run (a new run is created).

    The active run's row lock is held from here to the commit: every write
    that adds a pending turn, joins one or interrupts holds it, and so does
    the statement that ends the run (and queues the next turn,
    runqueue_promote), so they take turns (docs/decisions/sessions.md, "Busy
    sessions: on_busy")."""
    active = (
        Run.objects.select_for_update(no_key=True)
        .filter(tenant=request.tenant, session_id=request.session_id, status__in=ACTIVE_STATUSES)
        .first()
    )
    if active is None:
        return None
    if active.status == RunStatus.QUEUED and active.start_by is not None:
        if leases.expire_active_turn(active.id):
            # No worker took it in time: expired now, its line moved on.
            return _route_session(request, request_hash)
    policy = request.on_busy
    if active.status == RunStatus.WAITING_FOR_USER and policy in (None, "answer"):
        # What the user writes while the agent waits for them is the answer,
        # unless the submit says otherwise (an explicit policy is honoured).
        leases.deliver_locked(active.id, active.priority, request.payload)
        active.refresh_from_db()
        return _keyed(request, request_hash, active, SubmitOutcome.INPUT_DELIVERED)
    if policy is None:
        policy = get_settings().SESSION_ON_BUSY
    if policy in ("merge", "debounce", "latest"):
        merged = _merge(request, active, policy)
        if merged is not None:
            return _keyed(request, request_hash, merged, SubmitOutcome.MERGED)
        if policy == "debounce":
            return _enqueue(request, request_hash, active, debounced=True)
        policy = "enqueue"
    if policy == "steer":
        return _enqueue(request, request_hash, active, steer=True)
    if policy in ("enqueue", "answer"):
        return _enqueue(request, request_hash, active)
    if policy in ("interrupt", "rollback"):
        return _interrupt(request, request_hash, active, carry=policy == "interrupt")
    raise ActiveRunConflict(request.session_id or "", active.id, active.status)


def _keyed(
    request: CheckedSubmission, request_hash: str, run: Run, outcome: SubmitOutcome
) -> Submission:
    """A submit that made no run of its own: its key remembers the run it
    reached and how."""
    _remember_key(request, request_hash, run, outcome)
    named = _KEY_OUTCOMES[outcome]
    return Submission(run=run, outcome=named, original_outcome=named)


def _line(request: CheckedSubmission) -> QuerySet[Run]:
    """The session's pending turns (runqueue_run_pending_place)."""
    return Run.objects.filter(
        tenant=request.tenant, session_id=request.session_id, status=RunStatus.PENDING
    )


def _enqueue(
    request: CheckedSubmission,
    request_hash: str,
    active: Run,
    *,
    steer: bool = False,
    debounced: bool = False,
) -> Submission:
    """A pending turn at the end of the session's line, if the line has room
    (``SESSION_MAX_PENDING``): read after the active run's lock is held, so
    every turn added before is counted, and places never collide.
    ``steer``: the running turn may read it (``ctx.steers()``); if it does
    not, it runs as a turn like any other."""
    line = _line(request).aggregate(n=Count("id"), last=Max("place"))
    limit = get_settings().SESSION_MAX_PENDING
    if limit is not None and line["n"] >= limit:
        raise SessionQueueFull(request.session_id or "", active.id, limit)
    outcome = SubmitOutcome.STEERED if steer else SubmitOutcome.ENQUEUED
    turn: dict[str, JSON] | None = {STEER: True} if steer else None
    if debounced:
        request, turn = _debounced(request)
    run = _create_run(
        request, request_hash, place=(line["last"] or 0) + 1, outcome=outcome, turn=turn
    )
    named = _KEY_OUTCOMES[outcome]
    return Submission(run=run, outcome=named, original_outcome=named)


def _interrupt(
    request: CheckedSubmission, request_hash: str, active: Run, *, carry: bool
) -> Submission:
    """The new run at the head of the session's line, then the active run
    cancelled as an operator's cancel is (its handler told, a
    non-idempotent tool call in flight uncertain, its children cancelled),
    whose statement queues the head: this run. ``carry``: the new run
    names the old one (``Run.interrupted``, ``ctx.interrupted``)."""
    first = _line(request).aggregate(first=Min("place"))["first"]
    outcome = SubmitOutcome.INTERRUPTED if carry else SubmitOutcome.ROLLED_BACK
    run = _create_run(
        request,
        request_hash,
        place=(first if first is not None else 1) - 1,
        outcome=outcome,
        interrupted_id=active.id if carry else None,
    )
    leases.cancel_in_transaction(
        active.id,
        reason=str(outcome),
        actor=request.principal or "runqueue",
        data={"by": str(run.id)},
    )
    run.refresh_from_db()
    named = _KEY_OUTCOMES[outcome]
    return Submission(run=run, outcome=named, original_outcome=named)


def _merge(request: CheckedSubmission, active: Run, policy: str = "merge") -> Run | None:
    """Join the payload to the session's newest turn not started yet: its
    last pending turn, else the active run if no claim has taken it; the
    run it joined, or None (nothing to join: another kind, never started
    none, or a merged payload over ``MAX_PAYLOAD_BYTES``). ``debounce``
    also pushes the turn's start back by the window (never past its longest
    wait); ``latest`` replaces the turn's messages with this one, the
    replaced recorded in ``run.superseded``."""
    target = _line(request).select_for_update(no_key=True).order_by("-place").first()
    if target is None and active.status == RunStatus.QUEUED and active.started_at is None:
        target = active
    if target is None or target.kind != request.kind:
        return None
    changes: dict[str, object] = {}
    if policy == "latest":
        turn = {k: v for k, v in (target.turn or {}).items() if k != PAYLOADS}
        changes = {"payload": request.payload, "turn": turn or None}
    else:
        turn = joined(target, request.payload)
        if len(json.dumps(turn)) > get_settings().MAX_PAYLOAD_BYTES:
            return None
        changes = {"turn": turn}
    if policy == "debounce" and request.debounce is not None:
        turn, due = _pushed(target, request)
        changes.update(turn=turn, scheduled_for=due)
    updated = Run.objects.filter(
        id=target.id, status=target.status, started_at__isnull=True
    ).update(**changes)
    if updated != 1:
        return None
    if policy == "latest":
        replaced = {"replaced": turn_payloads(target), "by": request.payload}
        events.append(target.id, events.SUPERSEDED, target.lease_epoch, replaced)
    else:
        events.append(target.id, events.MERGED, target.lease_epoch, {"turns": len(turn[PAYLOADS])})
    target.refresh_from_db()
    return target


#: A debounced turn's longest wait, in its ``turn``: an aware time, ISO 8601.
DEBOUNCE_UNTIL = "debounce_until"


def _debounced(request: CheckedSubmission) -> tuple[CheckedSubmission, dict[str, JSON]]:
    """A new debounced turn: due one window from now (or later, if it says
    so), with its longest wait recorded for the messages that join it."""
    now = db_now()
    window = dt.timedelta(seconds=request.debounce or 0)
    due = max(now + window, request.scheduled_for or now)
    until = now + dt.timedelta(seconds=request.debounce_max or 0)
    turn: dict[str, JSON] = {DEBOUNCE_UNTIL: until.isoformat()}
    return dataclasses.replace(request, scheduled_for=due), turn


def _pushed(target: Run, request: CheckedSubmission) -> tuple[dict[str, JSON], dt.datetime]:
    """A message joins a debounced turn: its start moves one window on from
    now, never past the turn's longest wait (from its first message)."""
    now = db_now()
    turn = dict(target.turn or {})
    until_text = turn.get(DEBOUNCE_UNTIL)
    until = (
        dt.datetime.fromisoformat(until_text)
        if isinstance(until_text, str)
        else now + dt.timedelta(seconds=request.debounce_max or 0)
    )
    turn[DEBOUNCE_UNTIL] = until.isoformat()
    turn[PAYLOADS] = joined(target, request.payload)[PAYLOADS]
    due = max(now + dt.timedelta(seconds=request.debounce or 0), target.scheduled_for or now)
    return turn, min(due, until)


def _create_run(
    request: CheckedSubmission,
    request_hash: str,
    *,
    place: int | None = None,
    outcome: SubmitOutcome = SubmitOutcome.CREATED,
    interrupted_id: uuid.UUID | None = None,
    turn: dict[str, JSON] | None = None,
) -> Run:
    """The run (and its key) in one statement, in a savepoint of the routing's
    transaction; with a ``place``, a pending turn in its session's line;
    with a ``turn``, how it was routed (``runqueue.turns``), set in a
    second statement so the plain insert stays as it is."""
    try:
        with transaction.atomic():
            (run,) = _insert_runs(
                [request],
                [request_hash],
                place=place,
                key_outcome=outcome,
                interrupted_id=interrupted_id,
            )
            if turn is not None:
                Run.objects.filter(id=run.id).update(turn=turn)
                run.turn = turn
    except IntegrityError as exc:
        if constraint_name(exc) not in (SESSION_CONSTRAINT, KEY_CONSTRAINT):
            raise
        # Another submit won the session slot or the key while we routed; its
        # key, if it is the same request, is committed now and is the answer.
        raise _Retry from exc
    return run


def answer(
    run_id: uuid.UUID | str,
    data: JSON = None,
    *,
    tenant: str = "default",
    principal: str = "",
    idempotency_key: str | None = None,
) -> Submission:
    """``deliver_input`` (answer a run waiting for the user) that honours an
    Idempotency-Key as ``submit`` does, in the same key store: the same
    answer to the same run again is the first one's run, ``outcome``
    ``replayed`` (``original_outcome`` ``input_delivered``), not an
    InvalidTransition; the key with another answer, another run or a submit
    is IdempotencyConflict. Without a key it is ``deliver_input``.

    Raises InvalidArgument (nothing written), RunNotFound, InvalidTransition
    (the run does not wait for the user), IdempotencyConflict or
    IdempotencyInProgress.
    """
    if idempotency_key is None:
        run = leases.deliver_input(run_id, data)
        return Submission(run=run, outcome="input_delivered", original_outcome="input_delivered")
    if (problem := idempotency_key_problem(idempotency_key)) is not None:
        raise InvalidSubmission("idempotency_key", problem)
    parsed = leases.checked_input(run_id, data)
    canonical = json.dumps(
        {"answer": str(parsed), "input": data}, sort_keys=True, separators=(",", ":")
    )
    request_hash = hashlib.sha256(canonical.encode()).hexdigest()
    for _ in range(3):
        try:
            return _answer_once(parsed, data, tenant, principal, idempotency_key, request_hash)
        except _Retry:
            continue
    raise IdempotencyInProgress(idempotency_key)


def _answer_once(
    run_id: uuid.UUID, data: JSON, tenant: str, principal: str, key: str, request_hash: str
) -> Submission:
    try:
        with transaction.atomic(durable=True):
            _set_lock_timeout()
            replay = _replay_key(tenant, principal, key, request_hash)
            if replay is not None:
                return replay
            try:
                leases.deliver_waiting(run_id, data)
            except InvalidTransition:
                # A same-key answer may have committed while we waited for
                # the run's lock: a statement's fresh snapshot shows its key.
                replay = _replay_key(tenant, principal, key, request_hash)
                if replay is not None:
                    return replay
                raise
            run = Run.objects.get(id=run_id)
            _store_key(tenant, principal, key, request_hash, run, SubmitOutcome.INPUT_DELIVERED)
            return Submission(
                run=run, outcome="input_delivered", original_outcome="input_delivered"
            )
    except OperationalError as exc:
        if moved_by_another(exc):
            raise _Retry from exc  # the run moved (it ended) while we waited for it
        if sqlstate(exc) == "55P03":  # lock_not_available
            raise IdempotencyInProgress(key) from exc
        raise


def submit_many(requests: Iterable[SubmitRequest]) -> list[Submission]:
    """Submit many runs at once (an agent's fan-out): one ``Submission`` per
    request, in order, all or nothing.

    Each request follows ``submit``'s rules (its key replays or conflicts,
    one active run per session). Runs without a key to replay or a session
    to deliver to are written ``SUBMIT_MANY_CHUNK`` to a statement; the rest
    one by one, in the same transaction. An error raised for a request
    (InvalidSubmission, UnknownKind, ActiveRunConflict, IdempotencyConflict,
    ...) carries its position as ``.index`` and nothing of the call is
    written. Idle workers are woken once, on commit.
    """
    checked: list[CheckedSubmission] = []
    names = submission_fields.NAMES
    checks = BatchChecks()
    try:
        for item in requests:
            if not isinstance(item, SubmitRequest):
                raise InvalidSubmission(
                    "requests", f"expected SubmitRequest, got {type(item).__name__}"
                )
            checked.append(checks.require({n: getattr(item, n) for n in names}))
    except RunqueueError as exc:
        _tag(exc, len(checked))  # the requests before it all passed
        raise
    out: list[Submission] = []
    with transaction.atomic(durable=True):
        for start in range(0, len(checked), SUBMIT_MANY_CHUNK):
            chunk = checked[start : start + SUBMIT_MANY_CHUNK]
            hashes = [_hash(r) if r.idempotency_key is not None else "" for r in chunk]
            try:
                with transaction.atomic():
                    runs = _insert_runs(chunk, hashes)
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
        (run,) = _insert_runs([request], [request_hash])
        return Submission(run=run, outcome="created", original_outcome="created")
    return _route(request, request_hash, durable=False)


def _remember_key(request: CheckedSubmission, request_hash: str, run: Run, outcome: str) -> None:
    if request.idempotency_key is None:
        return
    _store_key(
        request.tenant, request.principal, request.idempotency_key, request_hash, run, outcome
    )


def _store_key(
    tenant: str, principal: str, key: str, request_hash: str, run: Run, outcome: str
) -> None:
    """The key's row in a savepoint; _Retry if a same-key request wrote it first."""
    retention = dt.timedelta(seconds=get_settings().IDEMPOTENCY_KEY_RETENTION_SECONDS)
    try:
        with transaction.atomic():
            IdempotencyKey.objects.create(
                tenant=tenant,
                principal=principal,
                key=key,
                request_hash=request_hash,
                run=run,
                outcome=outcome,
                expires_at=Now() + retention,
            )
    except IntegrityError as exc:
        if constraint_name(exc) != KEY_CONSTRAINT:
            raise
        raise _Retry from exc


def _insert_runs(
    requests: Sequence[CheckedSubmission],
    hashes: Sequence[str],
    *,
    place: int | None = None,
    key_outcome: SubmitOutcome = SubmitOutcome.CREATED,
    interrupted_id: uuid.UUID | None = None,
) -> list[Run]:
    """``insert_runs`` under the submitting trace."""
    return insert_runs(
        requests,
        hashes,
        traceparent=tracing.current_traceparent(),
        place=place,
        key_outcome=key_outcome,
        interrupted_id=interrupted_id,
    )
