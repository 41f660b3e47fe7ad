"""The owning worker's writes, each behind the fence: heartbeat,
checkpoint, tool records, events, finish, give up, wait, release."""

from __future__ import annotations

from typing import Any

from django.db.models import Max
from django.utils import timezone
from psycopg.types.json import Jsonb

from runqueue import events
from runqueue.errors import (
    TRANSIENT,
)
from runqueue.leases.base import (
    Lease,
    _check_json,
    _failure_summary,
    backoff,
    failure_record,
    notify,
)
from runqueue.leases.fence import _fenced, _renew_params
from runqueue.models import (
    Checkpoint,
    RunStatus,
    ToolInvocation,
    ToolStatus,
)

# --- worker writes -------------------------------------------------------------


def heartbeat(lease: Lease) -> bool:
    """Renew the lease; False once fenced (never raises for that)."""
    return _fenced(lease, "heartbeat", "fence_renew", _renew_params(lease)) is not None


def append_event(lease: Lease, type_: str, data: dict[str, Any] | None = None) -> bool:
    """A handler's own event, fenced like every worker write."""

    def write(_row: tuple) -> None:
        events.append(lease.run_id, type_, lease.epoch, data)

    return _fenced(lease, "event", "fence_renew", _renew_params(lease), write) is not None


def _next_checkpoint_seq(run_id: Any) -> int:
    last = Checkpoint.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"]
    return 0 if last is None else last + 1


def _save_checkpoint(lease: Lease, state: Any, tool_seq: int) -> None:
    seq = _next_checkpoint_seq(lease.run_id)
    Checkpoint.objects.create(
        run_id=lease.run_id, seq=seq, state=state, tool_seq=tool_seq, lease_epoch=lease.epoch
    )
    events.append(lease.run_id, events.CHECKPOINTED, lease.epoch, {"seq": seq})


def checkpoint(lease: Lease, state: Any, *, tool_seq: int = 0) -> bool:
    """Save the handler's state (and renew the lease); False once fenced.

    ``tool_seq`` is how many tool invocations the handler has made so far:
    on resume from this checkpoint, numbering continues from it.
    """
    _check_json(state, "checkpoint state")
    return (
        _fenced(
            lease,
            "checkpoint",
            "fence_renew",
            _renew_params(lease),
            lambda _row: _save_checkpoint(lease, state, tool_seq),
        )
        is not None
    )


def record_tool_started(
    lease: Lease, *, seq: int, tool: str, idempotency: str, arguments: Any
) -> bool:
    """Record a tool call as started, committed, before it runs; False once fenced."""

    def write(_row: tuple) -> None:
        ToolInvocation.objects.update_or_create(
            run_id=lease.run_id,
            seq=seq,
            defaults={
                "tool": tool,
                "idempotency": idempotency,
                "status": ToolStatus.STARTED,
                "arguments": arguments,
                "result": None,
                "error": None,
                "lease_epoch": lease.epoch,
                "finished_at": None,
            },
        )
        events.append(
            lease.run_id,
            events.TOOL_STARTED,
            lease.epoch,
            {"seq": seq, "tool": tool, "idempotency": idempotency},
        )

    _check_json(arguments, "tool arguments")
    return _fenced(lease, "tool.started", "fence_renew", _renew_params(lease), write) is not None


_TOOL_EVENT = {
    ToolStatus.COMPLETED: events.TOOL_COMPLETED,
    ToolStatus.FAILED: events.TOOL_FAILED,
    ToolStatus.UNCERTAIN: events.TOOL_UNCERTAIN,
}


def record_tool_outcome(
    lease: Lease, *, seq: int, status: str, result: Any = None, error: Any = None
) -> bool:
    """Record how a started tool call ended: completed, failed or uncertain."""
    if status not in _TOOL_EVENT:
        raise ValueError(f"not a tool outcome: {status!r}")

    def write(_row: tuple) -> None:
        updated = ToolInvocation.objects.filter(run_id=lease.run_id, seq=seq).update(
            status=status,
            result=result,
            error=error,
            lease_epoch=lease.epoch,
            finished_at=timezone.now(),
        )
        if updated != 1:
            raise ValueError(f"no tool invocation #{seq} for run {lease.run_id}")
        events.append(lease.run_id, _TOOL_EVENT[status], lease.epoch, {"seq": seq})

    _check_json(result, "tool result")
    return _fenced(lease, "tool." + status, "fence_renew", _renew_params(lease), write) is not None


def succeed_params(lease: Lease, result: Any = None) -> dict[str, Any]:
    """``fence_finish``'s parameters for a success (ValueError if ``result``
    cannot be stored)."""
    _check_json(result, "result")
    return {
        "status": RunStatus.SUCCEEDED,
        "result": Jsonb(result),
        "failure": None,
        "event_type": events.SUCCEEDED,
        "event_data": Jsonb({"attempt": lease.attempt}),
    }


def fail_params(_lease: Lease, failure: dict[str, Any]) -> dict[str, Any]:
    """``fence_finish``'s parameters for a permanent failure."""
    return {
        "status": RunStatus.FAILED,
        "result": None,
        "failure": Jsonb(failure),
        "event_type": events.FAILED,
        "event_data": Jsonb(_failure_summary(failure)),
    }


def succeed(lease: Lease, result: Any = None) -> bool:
    """Finish the run as succeeded with ``result``; False once fenced."""
    params = succeed_params(lease, result)
    return _fenced(lease, "succeed", "fence_finish", params, closes=True) is not None


def fail(lease: Lease, failure: dict[str, Any]) -> bool:
    """Dead-letter the run now (a permanent failure); False once fenced."""
    params = fail_params(lease, failure)
    return _fenced(lease, "fail", "fence_finish", params, closes=True) is not None


def give_up(lease: Lease, exc: BaseException | None = None) -> bool:
    """Give the lease up after a transient error: requeued with backoff, or dead-lettered."""
    failure = failure_record(
        exc,
        classification=TRANSIENT,
        attempt=lease.attempt,
        message=f"transient error on the last attempt ({lease.attempt}): {exc}",
    )

    def write(row: tuple) -> None:
        _id, status, epoch, attempts, scheduled_for = row
        if status == RunStatus.FAILED:
            events.append(lease.run_id, events.FAILED, epoch, _failure_summary(failure))
        else:
            events.append(
                lease.run_id,
                events.REQUEUED,
                epoch,
                {
                    "reason": TRANSIENT,
                    "attempt": attempts,
                    "expired_epoch": lease.epoch,
                    "scheduled_for": scheduled_for.isoformat(),
                    "error_type": failure["error_type"],
                    "message": str(exc),
                },
            )
            notify(lease.run.priority)

    params = {"backoff_seconds": backoff(lease.attempt), "failure": Jsonb(failure)}
    return _fenced(lease, "give_up", "fence_give_up", params, write, closes=True) is not None


def wait_for_user(lease: Lease, question: Any, state: Any = None, *, tool_seq: int = 0) -> bool:
    """End the turn waiting for the user; the run keeps its session slot."""
    _check_json(question, "question")
    _check_json(state, "checkpoint state")

    def write(_row: tuple) -> None:
        if state is not None:
            _save_checkpoint(lease, state, tool_seq)
        events.append(lease.run_id, events.WAITING, lease.epoch, {"question": question})

    return _fenced(lease, "wait_for_user", "fence_wait", None, write, closes=True) is not None


def release(lease: Lease, reason: str) -> bool:
    """Give a run back unfinished (worker shutdown): queued at once, the
    attempt returned, the epoch bumped so a handler still running is fenced."""

    def write(row: tuple) -> None:
        events.append(
            lease.run_id, events.REQUEUED, row[1], {"reason": reason, "attempt": lease.attempt}
        )
        notify(lease.run.priority)

    return _fenced(lease, "release", "fence_release", None, write, closes=True) is not None
