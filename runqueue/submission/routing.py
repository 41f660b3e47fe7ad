"""Where a submit to a session goes: the session's active run is locked,
then a run waiting for the user takes it as input, or ``on_busy`` decides:
a pending turn in line (``enqueue``, ``steer``), the payload joined to a turn
not started yet (``merge``, ``debounce``, ``latest``), or a new run that
cancels the active one (``interrupt``, ``rollback``); docs/decisions/
sessions.md, "Busy sessions: on_busy". Concurrent submits are resolved by
the database's unique constraints and the active run's row lock, never by
a Python check. ``create_run`` writes the run (and its key) in a savepoint.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Sequence

from django.db import IntegrityError, transaction
from django.db.models import (
    Count,
    Max,
    Min,
    QuerySet,
)

from runqueue import events, leases
from runqueue.conf import get_settings
from runqueue.db import constraint_name, db_now
from runqueue.errors import (
    ActiveRunConflict,
    SessionQueueFull,
)
from runqueue.leases.turns import PAYLOADS, STEER, joined, turn_payloads
from runqueue.models import (
    ACTIVE_STATUSES,
    Run,
    RunStatus,
    SubmitOutcome,
)
from runqueue.observability import tracing
from runqueue.submission.inserts import KEY_CONSTRAINT, SESSION_CONSTRAINT, insert_runs
from runqueue.submission.keys import (
    KEY_OUTCOMES,
    Retry,
    Submission,
    remember_key,
)
from runqueue.submission.rules import (
    CheckedSubmission,
)
from runqueue.types import JSON


def route_session(request: CheckedSubmission, request_hash: str) -> Submission | None:
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
            return route_session(request, request_hash)
    policy = request.on_busy
    if active.status == RunStatus.WAITING_FOR_USER and policy in (None, "answer"):
        # What the user writes while the agent waits for them is the answer,
        # unless the submit says otherwise (an explicit policy is honoured).
        leases.deliver_locked(active.id, active.priority, request.payload)
        active.refresh_from_db()
        return keyed(request, request_hash, active, SubmitOutcome.INPUT_DELIVERED)
    if policy is None:
        policy = get_settings().SESSION_ON_BUSY
    if policy in ("merge", "debounce", "latest"):
        merged = _merge(request, active, policy)
        if merged is not None:
            return keyed(request, request_hash, merged, SubmitOutcome.MERGED)
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


def keyed(
    request: CheckedSubmission, request_hash: str, run: Run, outcome: SubmitOutcome
) -> Submission:
    """A submit that made no run of its own: its key remembers the run it
    reached and how."""
    remember_key(request, request_hash, run, outcome)
    named = KEY_OUTCOMES[outcome]
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
        request, turn = debounced_turn(request)
    run = create_run(
        request, request_hash, place=(line["last"] or 0) + 1, outcome=outcome, turn=turn
    )
    named = KEY_OUTCOMES[outcome]
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
    run = create_run(
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
    named = KEY_OUTCOMES[outcome]
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


def debounced_turn(request: CheckedSubmission) -> tuple[CheckedSubmission, dict[str, JSON]]:
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


def create_run(
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
    with a ``turn``, how it was routed (``runqueue.leases.turns``), set in a
    second statement so the plain insert stays as it is."""
    try:
        with transaction.atomic():
            (run,) = insert_traced(
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
        raise Retry from exc
    return run


def insert_traced(
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
