"""Transitions made by others than the owner: the sweeper's requeue and
dead letter, cancel, an operator's requeue and resolution (pruning is in
runqueue/history/housekeeping.py). Each bumps lease_epoch, so no stale owner can
write again."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now

from runqueue import events
from runqueue.conf import get_settings
from runqueue.db import db_now
from runqueue.errors import (
    ActiveRunConflict,
    InvalidArgument,
    InvalidTransition,
    RunNotFound,
    ToolInvocationNotFound,
)
from runqueue.leases.base import (
    backoff,
    hooks,
    logger,
    notify,
    notify_cancel,
    retry_deadlocks,
    retry_moved,
)
from runqueue.leases.failures import Failure, lease_expired_failure
from runqueue.limits import REASON_MAX_LENGTH
from runqueue.models import (
    Idempotency,
    Run,
    RunStatus,
    ToolInvocation,
    ToolStatus,
)
from runqueue.sql import execute
from runqueue.validation import json_text, text_problem

# --- transitions by others: sweep, cancel ------------------------------------


def sweep(
    *, limit: int = 100, after_read: Callable[[Sequence[tuple]], None] | None = None
) -> list[tuple]:
    """Requeue (with backoff) or dead-letter runs whose lease expired.

    The UPDATE re-checks epoch, status and expiry against what was read, so
    a run finished or renewed in between is left alone. ``after_read`` is a
    test hook called between the read and the update.
    """
    with connection.cursor() as cursor:
        rows = execute(cursor, "expired_leases", {"limit": limit}).fetchall()
    if not rows:
        return []
    if after_read is not None:
        after_read(rows)
    params = {
        "ids": [r[0] for r in rows],
        "epochs": [r[1] for r in rows],
        "delays": [backoff(r[2]) for r in rows],
        # Stored only by a run dead-lettered on its last attempt.
        "failures": [json_text(lease_expired_failure(r[2], r[3]), "failure") for r in rows],
        "channel": get_settings().NOTIFY_CHANNEL,
    }

    def transaction_() -> list[tuple]:
        with transaction.atomic(durable=True):
            with connection.cursor() as cursor:
                swept = execute(cursor, "sweep_expired", params).fetchall()
            if hooks.inside_sweep is not None:
                hooks.inside_sweep(swept)
            if any(status == RunStatus.QUEUED for _id, status, _e, _a in swept):
                notify(None)
        return swept

    swept = retry_moved(transaction_)
    for run_id, status, epoch, attempts in swept:
        logger.info("Swept run id=%s to %s epoch=%s attempt=%s", run_id, status, epoch, attempts)
    return swept


def checked_operation(operation: str, run_id: uuid.UUID | str, **texts: object) -> uuid.UUID:
    """The run id as a UUID, and each text (reason, actor) one the run's
    event can store: InvalidArgument naming it otherwise, before any write."""
    try:
        parsed = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        shown = str(run_id)[:40]
        raise InvalidArgument(operation, "run_id", f"must be a UUID, got {shown!r}") from None
    for name, value in texts.items():
        if not isinstance(value, str):
            raise InvalidArgument(operation, name, f"must be a string, got {type(value).__name__}")
        if len(value) > REASON_MAX_LENGTH:
            raise InvalidArgument(
                operation,
                name,
                f"must be at most {REASON_MAX_LENGTH} characters, got {len(value)}",
            )
        if (problem := text_problem(value)) is not None:
            raise InvalidArgument(operation, name, problem)
    return parsed


def cancel(run_id: uuid.UUID | str, *, reason: str, actor: str, cascade: bool = True) -> Run:
    """Cancel a non-terminal run and, with ``cascade``, every non-terminal
    run below it (its children, theirs, ...), in one transaction; each epoch
    bump fences a worker still running one, and no child can be spawned
    after it commits. Cancelling a child counts in its parent as any
    terminal transition does (a parent waiting for it resumes).
    Raises InvalidArgument (a malformed id or reason), RunNotFound, InvalidTransition."""
    run_id = checked_operation("cancel", run_id, reason=reason, actor=actor)
    return retry_deadlocks(
        f"cancel of run id={run_id}",
        lambda: _cancel(run_id, reason=reason, actor=actor, cascade=cascade),
    )


def _cancel(run_id: uuid.UUID, *, reason: str, actor: str, cascade: bool) -> Run:
    with transaction.atomic(durable=True):
        cancel_in_transaction(run_id, reason=reason, actor=actor, cascade=cascade)
    return Run.objects.get(id=run_id)


def cancel_tree(
    root_id: uuid.UUID, *, reason: str, actor: str, failure: Failure | None = None
) -> list[uuid.UUID]:
    """Cancel every live run of the tree under ``root_id``, the root too if
    it is live (a root that finished may still have live descendants), in
    one transaction: ``cancel``'s statements level by level, each run its
    ``run.cancelled`` (``reason``, ``actor``) and its worker told to stop.
    With ``failure``, each run cancelled keeps it as its failure record.
    The ids cancelled (none if the whole tree had ended)."""
    return retry_deadlocks(
        f"cancel of the tree of run id={root_id}",
        lambda: _cancel_tree(root_id, reason, actor, failure),
    )


def _cancel_tree(
    root_id: uuid.UUID, reason: str, actor: str, failure: Failure | None
) -> list[uuid.UUID]:
    with transaction.atomic(durable=True):
        row = _cancel_one(root_id, {"reason": reason, "actor": actor})
        done = [row] if row is not None else []
        done += _cancel_below(root_id, reason=reason, actor=actor)
        if failure is not None and done:
            with connection.cursor() as cursor:
                execute(
                    cursor,
                    "mark_spend_capped",
                    {
                        "ids": [i for i, _e in done],
                        "epochs": [e for _i, e in done],
                        "failure": json_text(failure, "failure"),
                    },
                )
    return [run_id for run_id, _epoch in done]


def cancel_in_transaction(
    run_id: uuid.UUID,
    *,
    reason: str,
    actor: str,
    cascade: bool = True,
    data: dict[str, str] | None = None,
) -> None:
    """``cancel``'s writes inside the caller's transaction (an interrupting
    submit's): the run, its event (with ``data`` added), its interrupted
    tool calls, the NOTIFY that stops its handler, and with ``cascade``
    every level of its descendants. Raises RunNotFound, InvalidTransition."""
    row = _cancel_one(run_id, {"reason": reason, "actor": actor, **(data or {})})
    if row is None:
        status = Run.objects.filter(id=run_id).values_list("status", flat=True).first()
        if status is None:
            raise RunNotFound(run_id)
        raise InvalidTransition(run_id, status, "cancel")
    if cascade:
        _cancel_below(run_id, reason=reason, actor=actor)


def _cancel_one(run_id: uuid.UUID, data: dict[str, str]) -> tuple[uuid.UUID, int] | None:
    """Cancel the run if it is live, with its event (``data``): its id and
    new epoch, or None (it has ended, or there is no such run)."""
    params = {"run_id": run_id, "channel": get_settings().NOTIFY_CHANNEL}
    with connection.cursor() as cursor:
        row = execute(cursor, "cancel", params).fetchone()
    if row is None:
        return None
    _cancelled(row[0], row[1], data)
    return row[0], row[1]


def _cancel_below(root_id: uuid.UUID, *, reason: str, actor: str) -> list[tuple[uuid.UUID, int]]:
    """Cancel every live run below ``root_id``, in the caller's transaction:
    one statement per level, top-down, so each sees the children committed
    before its parents were locked by the level above (a finished run may
    still have live children, so every child is walked). The (id, new
    epoch) of each run cancelled, each event ``cascade_from`` the root."""
    data = {"reason": reason, "actor": actor, "cascade_from": str(root_id)}
    done: list[tuple[uuid.UUID, int]] = []
    level = [root_id]
    while level:
        params = {"parent_ids": level, "channel": get_settings().NOTIFY_CHANNEL}
        with connection.cursor() as cursor:
            rows = execute(cursor, "cancel_children", params).fetchall()
        for child_id, epoch in rows:
            if epoch is not None:
                _cancelled(child_id, epoch, data)
                done.append((child_id, epoch))
        level = [child_id for child_id, _epoch in rows]
    return done


def _cancelled(run_id: uuid.UUID, epoch: int, data: dict[str, str]) -> None:
    """What a cancel writes besides the row: its event, interrupted tool
    calls, and the NOTIFY that stops the worker running it (if any) on
    commit; the others find no lease of that run and ignore it."""
    events.append(run_id, events.CANCELLED, epoch, data)
    _interrupted_tools(run_id, epoch)
    notify_cancel(run_id, epoch)


def _interrupted_tools(run_id: uuid.UUID, epoch: int) -> None:
    """A non-idempotent tool call started and not recorded when the run is
    cancelled may or may not have happened: ``uncertain`` (an operator can
    resolve it). An idempotent one needs no answer: nothing reruns it."""
    started = ToolInvocation.objects.filter(
        run_id=run_id, status=ToolStatus.STARTED, idempotency=Idempotency.NON_IDEMPOTENT
    )
    seqs = list(started.values_list("seq", flat=True))
    if not seqs:
        return
    started.update(
        status=ToolStatus.UNCERTAIN,
        error={
            "type": "RunCancelled",
            "message": "the run was cancelled while the call was in flight: "
            "it may or may not have happened",
        },
        finished_at=Now(),
    )
    for seq in seqs:
        events.append(run_id, events.TOOL_UNCERTAIN, epoch, {"seq": seq})


def requeue(run_id: uuid.UUID | str, *, actor: str, reason: str = "") -> Run:
    """An operator's requeue of a dead-lettered run.

    Raises RunNotFound, InvalidTransition (not failed) or ActiveRunConflict
    (its session has another active run now); InvalidArgument before any write.
    """
    run_id = checked_operation("requeue", run_id, reason=reason, actor=actor)
    previous = Run.objects.filter(id=run_id).values_list("status", "failure", "session_id").first()
    if previous is None:
        raise RunNotFound(run_id)
    status, failure, session_id = previous

    def transaction_() -> None:
        with transaction.atomic(durable=True):
            with connection.cursor() as cursor:
                row = execute(cursor, "operator_requeue", {"run_id": run_id}).fetchone()
                if row is None:
                    current = Run.objects.values_list("status", flat=True).get(id=run_id)
                    raise InvalidTransition(run_id, current, "requeue")
                # A later statement than the requeue's: it counts with the
                # run's row lock held (docs/decisions/run-trees.md, "Fan-in").
                execute(
                    cursor,
                    "requeue_recount",
                    {
                        "run_id": run_id,
                        "parent_id": row[3],
                        "channel": get_settings().NOTIFY_CHANNEL,
                    },
                )
            events.append(
                run_id,
                events.OPERATOR_REQUEUED,
                row[1],
                {"actor": actor, "reason": reason, "previous_failure": failure},
            )
            notify(row[2])

    try:
        retry_moved(transaction_)
    except IntegrityError as exc:
        active = Run.objects.active().filter(session_id=session_id).exclude(id=run_id).first()
        raise ActiveRunConflict(
            session_id or "", active.id if active else None, active.status if active else None
        ) from exc
    return Run.objects.get(id=run_id)


def resolve_uncertain(
    tool_invocation_id: int, *, happened: bool, note: str, actor: str
) -> ToolInvocation:
    """Record an operator's answer for an uncertain tool invocation: did it happen?

    Raises ToolInvocationNotFound or InvalidTransition (not uncertain, or
    already resolved).
    """
    with transaction.atomic(durable=True):
        tool = (
            ToolInvocation.objects.select_for_update()
            .select_related("run")
            .filter(id=tool_invocation_id)
            .first()
        )
        if tool is None:
            raise ToolInvocationNotFound(tool_invocation_id)
        if tool.status != ToolStatus.UNCERTAIN or tool.resolution is not None:
            raise InvalidTransition(tool.run_id, tool.status, "resolve this tool invocation of")
        tool.resolution = {
            "happened": happened,
            "note": note,
            "actor": actor,
            "at": db_now().isoformat(),
        }
        tool.save(update_fields=["resolution"])
        events.append(
            tool.run_id,
            events.TOOL_RESOLVED,
            tool.run.lease_epoch,
            {
                "seq": tool.seq,
                "tool": tool.tool,
                "happened": happened,
                "note": note,
                "actor": actor,
            },
        )
    return tool
