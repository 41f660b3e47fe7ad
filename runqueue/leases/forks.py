"""Forking a finished run from one of its steps (docs/decisions/run-trees.md,
"Forking a run").

A fork is a new run of the same kind, tenant, principal, priority and
concurrency key whose first ``from_step`` steps (the original's tool
records, tool outcomes and spawns, numbered in call order from 0) are
copied into its own records: its handler starts from the top, replays
those steps from the copies without running them, and runs the rest. It
holds no session slot and has no parent: the root of a tree of its own.
Lineage goes both ways: ``Run.forked_from`` on the fork, ``Run.forks`` on
the original, and ``run.forked`` in both logs.
"""

from __future__ import annotations

import uuid

from django.db import connection, transaction

from runqueue import registry
from runqueue.conf import get_settings
from runqueue.errors import (
    ForkRefused,
    InvalidArgument,
    InvalidTransition,
    RunNotFound,
    UnknownKind,
)
from runqueue.leases.base import lock_run, notify_payload, retry_moved
from runqueue.leases.transitions import checked_operation
from runqueue.leases.writes import SPAWN_TOOL
from runqueue.models import (
    TERMINAL_STATUSES,
    Idempotency,
    Run,
    RunStatus,
    ToolInvocation,
    ToolStatus,
    TreeSpend,
)
from runqueue.sql import execute
from runqueue.types import JSON
from runqueue.validation import json_problem


def fork(
    run_id: uuid.UUID | str,
    *,
    from_step: int,
    payload: JSON = None,
    actor: str,
    reason: str,
    traceparent: str = "",
) -> Run:
    """A new run of finished run ``run_id``'s kind, tenant, principal,
    priority and concurrency key, holding no session slot, whose first
    ``from_step`` recorded steps (tool outcomes and spawns, in call order)
    are copied so its handler replays them without running them again;
    ``payload`` replaces the original's (None: the same). ``run.forked`` on
    both runs names ``actor`` and ``reason``. Returns the fork.
    ``traceparent``: the trace the fork links to (``runqueue.fork`` passes
    the caller's).

    Raises InvalidArgument (a malformed id, reason or actor, a step out of
    range, a payload that cannot be stored), RunNotFound, InvalidTransition
    (the run is not finished), UnknownKind (no handler for its kind now),
    ForkRefused (a step to copy has an outcome nobody knows, or spawned a
    child still live). Nothing is written then.
    """
    run_id = checked_operation("fork", run_id, reason=reason, actor=actor)
    if isinstance(from_step, bool) or not isinstance(from_step, int) or from_step < 0:
        raise InvalidArgument(
            "fork", "from_step", f"must be an integer >= 0, got {_shown(from_step)}"
        )
    payload_text = None if payload is None else _payload_text(payload)
    return retry_moved(
        lambda: _fork(run_id, from_step, payload_text, actor, reason, traceparent, {})
    )


def fork_from_failure(
    run_id: uuid.UUID | str, *, actor: str, reason: str, traceparent: str = ""
) -> Run:
    """``fork`` of a dead-lettered run from where it failed (``failure_cut``):
    the steps before its last failed tool call kept, that call and what
    follows run again; a run with no failed call keeps every step it
    recorded. ``run.forked`` names the failed call (``failed_step``).
    InvalidTransition unless the run failed; ForkRefused as ``fork``."""
    run_id = checked_operation("fork", run_id, reason=reason, actor=actor)
    status = Run.objects.filter(id=run_id).values_list("status", flat=True).first()
    if status is None:
        raise RunNotFound(run_id)
    if status != RunStatus.FAILED:
        raise InvalidTransition(run_id, status, "fork from failure")
    kept, failed = failure_cut(run_id)
    note: dict[str, JSON] = {} if failed is None else {"failed_step": failed}
    return retry_moved(lambda: _fork(run_id, kept, None, actor, reason, traceparent, note))


def failure_cut(run_id: uuid.UUID) -> tuple[int, int | None]:
    """(steps a fork from failure keeps, the failed call it runs again or
    None). A kept failed call would replay its failure, and the fork would
    dead-letter with the same error: the cut is the last call recorded
    ``failed`` (a tool's failure most often ends a run); earlier failures
    the handler got past are kept, replayed as they were. Without one,
    every recorded step is kept (the handler failed after them)."""
    steps = recorded_steps(run_id)
    failed = (
        ToolInvocation.objects.filter(run_id=run_id, seq__lt=steps, status=ToolStatus.FAILED)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    return (steps if failed is None else failed), failed


def recorded_steps(run_id: uuid.UUID) -> int:
    """How many steps a run recorded: its tool records numbered 0, 1, ...
    without a gap (a fork can copy only such a prefix)."""
    seqs = ToolInvocation.objects.filter(run_id=run_id).order_by("seq")
    count = 0
    for seq in seqs.values_list("seq", flat=True):
        if seq != count:
            break
        count += 1
    return count


def _payload_text(payload: JSON) -> str:
    text, problem = json_problem(payload)
    limit = get_settings().MAX_PAYLOAD_BYTES
    if problem is None and len(text) > limit:
        problem = f"is {len(text)} bytes as JSON, over the {limit}-byte limit"
    if problem is not None:
        raise InvalidArgument("fork", "payload", problem)
    return text


def _fork(
    run_id: uuid.UUID,
    from_step: int,
    payload_text: str | None,
    actor: str,
    reason: str,
    traceparent: str,
    note: dict[str, JSON],
) -> Run:
    with transaction.atomic(durable=True):
        # The original's row lock: no requeue makes it live meanwhile, and
        # its run.forked event is written under it like any other.
        status, _reason, _name, priority = lock_run(run_id)
        if status not in TERMINAL_STATUSES:
            raise InvalidTransition(run_id, status, "fork")
        original = Run.objects.get(id=run_id)
        if not registry.is_registered(original.kind):
            raise UnknownKind(original.kind)
        _check_steps(run_id, from_step)
        fork_id = uuid.uuid4()
        common = {"from_step": from_step, "actor": actor, "reason": reason, **note}
        params = {
            "run_id": run_id,
            "fork_id": fork_id,
            "from_step": from_step,
            "payload": payload_text,
            "traceparent": traceparent,
            "fork_data": _json(
                {**common, "forked_from": str(run_id), "payload_edited": payload_text is not None}
            ),
            "original_data": _json({**common, "fork": str(fork_id)}),
            "channel": get_settings().NOTIFY_CHANNEL,
            "notify": notify_payload(priority),
        }
        with connection.cursor() as cursor:
            execute(cursor, "fork_run", params).fetchone()
        _carry_spend_cap(original, fork_id)
    return Run.objects.get(id=fork_id)


def _json(data: dict[str, JSON]) -> str:
    text, _problem = json_problem(data)
    return text


def _check_steps(run_id: uuid.UUID, from_step: int) -> None:
    """ForkRefused or InvalidArgument unless the first ``from_step`` steps
    can be copied: numbered without a gap, each with a known outcome, each
    spawn's child finished (a fork shares it and cannot count it in its
    own fan-in)."""
    records = ToolInvocation.objects.filter(run_id=run_id)
    # The bound first, from a count: a step number past the records (2**31,
    # 10**20) is refused before it reaches a query or sizes anything.
    if from_step > records.count():
        raise _past_the_steps(run_id, from_step)
    steps = list(
        records.filter(seq__lt=from_step)
        .order_by("seq")
        .values_list("seq", "tool", "status", "idempotency", "resolution", "result")
    )
    if any(step[0] != number for number, step in enumerate(steps)) or len(steps) != from_step:
        raise _past_the_steps(run_id, from_step)
    for seq, tool, status, idempotency, resolution, result in steps:
        if status == ToolStatus.UNCERTAIN and resolution is None:
            raise ForkRefused(
                run_id,
                seq,
                f"step #{seq} ({tool}) ended uncertain and nobody resolved it: resolve it "
                f"(did it happen?) or fork from step {seq} or before",
            )
        if status == ToolStatus.STARTED and idempotency != Idempotency.IDEMPOTENT:
            raise ForkRefused(
                run_id,
                seq,
                f"step #{seq} ({tool}) started and its outcome was never recorded: it may "
                f"or may not have happened; fork from step {seq} or before",
            )
        if tool == SPAWN_TOOL and isinstance(result, dict):
            _check_child(run_id, seq, result.get("run_id"))


def _past_the_steps(run_id: uuid.UUID, from_step: int) -> InvalidArgument:
    return InvalidArgument(
        "fork",
        "from_step",
        f"must be at most {recorded_steps(run_id)} (the steps run {run_id} recorded), "
        f"got {_shown(from_step)}",
    )


def _shown(value: object) -> str:
    """``value`` for an error message: an integer too long to print (past
    Python's 4,300 digits) by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


def _check_child(run_id: uuid.UUID, seq: int, child: object) -> None:
    status = Run.objects.filter(id=str(child)).values_list("status", flat=True).first()
    if status is not None and status not in TERMINAL_STATUSES:
        raise ForkRefused(
            run_id,
            seq,
            f"step #{seq} spawned run {child}, which is still {status}: a fork shares the "
            f"children it replays; fork once it ended, or from step {seq} or before",
        )


def _carry_spend_cap(original: Run, fork_id: uuid.UUID) -> None:
    """The fork's tree gets the spend cap of the original's tree (its root's),
    with nothing spent yet."""
    root_id = original.id
    with connection.cursor() as cursor:
        row = execute(cursor, "usage_root", {"run_id": original.id}).fetchone()
    if row is not None:
        root_id = row[0]
    cap = TreeSpend.objects.filter(run_id=root_id).values_list("spend_cap", flat=True).first()
    if cap is not None:
        TreeSpend.objects.create(run_id=fork_id, spend_cap=cap)
