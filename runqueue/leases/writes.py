"""The owning worker's writes, each behind the fence: heartbeat,
checkpoint, tool records (a spawn's among them), events, finish, give up,
wait, release."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING

from django.db.models.functions import Now
from psycopg.types.json import Jsonb

from runqueue import events
from runqueue.conf import get_settings
from runqueue.errors import (
    TRANSIENT,
    TransientError,
)
from runqueue.leases.base import (
    Lease,
    backoff,
    check_json,
    notify,
)
from runqueue.leases.calls import record_call, write_call
from runqueue.leases.checkpoints import save_checkpoint
from runqueue.leases.failures import failure_record, failure_summary
from runqueue.leases.fence import fenced, record_fenced, renew_params
from runqueue.leases.outcomes import (
    BudgetWait,
    Failed,
    Finish,
    GaveUp,
    Outcome,
    Released,
    Reported,
    Succeeded,
    Suspended,
    Waiting,
    json_text,
)
from runqueue.leases.reservations import refund
from runqueue.leases.turns import answer_from_line
from runqueue.leases.waits import suspend
from runqueue.models import (
    Idempotency,
    Run,
    RunStatus,
    ToolInvocation,
    ToolStatus,
)
from runqueue.sql import prepared
from runqueue.submission.inserts import insert_child
from runqueue.types import JSON
from runqueue.validation import check_state

if TYPE_CHECKING:
    from runqueue.submission.rules import CheckedSubmission

# --- worker writes -------------------------------------------------------------


def heartbeat(lease: Lease) -> bool:
    """Renew the lease; False once fenced (never raises for that)."""
    return fenced(lease, "heartbeat", "fence_renew", renew_params(lease)) is not None


def append_event(lease: Lease, type_: str, data: dict[str, JSON] | None = None) -> bool:
    """A handler's own event, fenced like every worker write."""

    def write(_row: tuple) -> None:
        events.append(lease.run_id, type_, lease.epoch, data)

    return fenced(lease, "event", "fence_renew", renew_params(lease), write) is not None


def publish_text(lease: Lease, pieces: Sequence[str]) -> bool:
    """Send ``pieces`` (NOTIFY payloads) to the run's live streams if this
    worker still owns the run; False once fenced. Writes no row: the
    lease is checked under the run row's share lock in the same statement."""
    return fenced(lease, "stream", "stream_text", {"pieces": list(pieces)}) is not None


def checkpoint(lease: Lease, state: JSON, *, tool_seq: int = 0) -> bool:
    """Save the handler's state (and renew the lease); False once fenced.

    ``tool_seq`` is how many tool invocations the handler has made so far:
    on resume from this checkpoint, numbering continues from it.
    """
    check_state(state)
    return (
        fenced(
            lease,
            "checkpoint",
            "fence_renew",
            renew_params(lease),
            lambda _row: save_checkpoint(lease, state, tool_seq),
        )
        is not None
    )


def record_tool_started(
    lease: Lease, *, seq: int, tool: str, idempotency: str, arguments: JSON
) -> bool:
    """Record a tool call as started, committed, before it runs; False once fenced."""
    shown: dict[str, JSON] = {"idempotency": idempotency}
    return record_call(lease, seq, ToolStatus.STARTED, tool, idempotency, arguments, shown)


_TOOL_EVENT: dict[str, str] = {
    ToolStatus.COMPLETED: events.TOOL_COMPLETED,
    ToolStatus.FAILED: events.TOOL_FAILED,
    ToolStatus.UNCERTAIN: events.TOOL_UNCERTAIN,
}


def record_tool_outcome(
    lease: Lease, *, seq: int, status: str, result: JSON = None, error: JSON = None
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
            lease_token=lease.token,
            finished_at=Now(),
        )
        if updated != 1:
            raise ValueError(f"no tool invocation #{seq} for run {lease.run_id}")
        events.append(lease.run_id, _TOOL_EVENT[status], lease.epoch, {"seq": seq})

    check_json(result, "tool result")
    return fenced(lease, "tool." + status, "fence_renew", renew_params(lease), write) is not None


def record_step(lease: Lease, *, seq: int, tool: str, arguments: JSON, result: JSON) -> bool:
    """Record a step with no side effect (a patch decision, ``ctx.patched``)
    as completed, in one fenced transaction; False once fenced. Replayed as
    any completed tool call is."""
    return _record_completed(lease, seq, tool, arguments, lambda: result) is not None


def record_effect(
    lease: Lease, *, seq: int, tool: str, arguments: JSON, effect: Callable[[], JSON]
) -> JSON | None:
    """Record a step whose effect is a row of runqueue's own (the schedule
    ``ctx.schedule`` makes): ``effect()`` writes it in the same fenced
    transaction, its value the step's result; None once fenced (nothing
    written). An attempt run again replays the recorded result."""
    made = _record_completed(lease, seq, tool, arguments, effect)
    return None if made is None else made[0]


def _record_completed(
    lease: Lease, seq: int, tool: str, arguments: JSON, effect: Callable[[], JSON]
) -> list[JSON] | None:
    """A completed idempotent step whose result ``effect()`` gives, written
    in one fenced transaction: ``[result]``, or None once fenced."""
    made: list[JSON] = []

    def write(_row: tuple) -> None:
        result = effect()
        write_call(
            lease,
            seq,
            tool=tool,
            idempotency=Idempotency.IDEMPOTENT,
            status=ToolStatus.COMPLETED,
            arguments=arguments,
            result=result,
            finished=True,
        )
        events.append(lease.run_id, events.TOOL_COMPLETED, lease.epoch, {"seq": seq, "tool": tool})
        made.append(result)

    check_json(arguments, "step arguments")
    if fenced(lease, "tool.completed", "fence_renew", renew_params(lease), write) is None:
        return None
    return made


#: The tool name a spawn is recorded under, in the parent's tool-call order.
SPAWN_TOOL = "runqueue.spawn"
#: The spawn record's argument that holds ``payload_digest(payload)``.
PAYLOAD_DIGEST = "payload_sha256"


def payload_digest(payload: JSON) -> str:
    """SHA-256 of a payload as canonical JSON (None is ``{}``, keys sorted,
    an integral float as its integer: payloads equal as JSON hash equal).
    A spawn's record keeps it, so a replay can tell another payload."""
    try:
        value = json.loads(
            json.dumps({} if payload is None else payload, allow_nan=False),
            parse_float=_canonical_float,
        )
    except (TypeError, ValueError):
        return ""  # not JSON: no spawn recorded it
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical_float(text: str) -> int | float:
    number = float(text)
    return int(number) if number.is_integer() else number


def spawn(lease: Lease, seq: int, request: CheckedSubmission, *, traceparent: str) -> Run | None:
    """Create ``request`` (checked) as a child of the leased run, recorded
    as its completed tool call ``seq``, behind the parent's fence
    (``fence_spawn``: the lease renewed and the child counted open under the
    parent's row lock); the child, or None once fenced (nothing written).
    ActiveRunConflict (nothing written) if the child's session is busy."""
    created: list[Run] = []

    def write(_row: tuple) -> None:
        child = insert_child(request, parent_id=lease.run_id, traceparent=traceparent)
        ToolInvocation.objects.create(
            run_id=lease.run_id,
            seq=seq,
            tool=SPAWN_TOOL,
            idempotency=Idempotency.IDEMPOTENT,
            status=ToolStatus.COMPLETED,
            arguments={
                "kind": request.kind,
                "session_id": request.session_id,
                PAYLOAD_DIGEST: payload_digest(request.payload),
            },
            result={"run_id": str(child.id)},
            lease_epoch=lease.epoch,
            lease_token=lease.token,
            finished_at=Now(),
        )
        events.append(
            lease.run_id,
            events.SPAWNED,
            lease.epoch,
            {"seq": seq, "child": str(child.id), "kind": request.kind},
        )
        created.append(child)

    if fenced(lease, "spawn", "fence_spawn", renew_params(lease), write) is None:
        return None
    return created[0]


def finish_params(lease: Lease, outcome: Finish) -> dict[str, object]:
    """A finish's values, JSON as text: for ``fence_finish`` (one run) and, as
    arrays, ``finish_and_claim``."""
    if isinstance(outcome, Succeeded):
        return {
            "status": RunStatus.SUCCEEDED.value,
            "result": outcome.text,
            "failure": None,
            "event_type": events.SUCCEEDED,
            "event_data": f'{{"attempt": {lease.attempt}}}',
            "channel": get_settings().NOTIFY_CHANNEL,
        }
    return {
        "status": RunStatus.FAILED.value,
        "result": None,
        "failure": json_text(outcome.failure, "failure"),
        "event_type": events.FAILED,
        "event_data": json_text(failure_summary(outcome.failure), "failure"),
        "channel": get_settings().NOTIFY_CHANNEL,
    }


def _finish(lease: Lease, outcome: Finish) -> bool:
    params = finish_params(lease, outcome)
    return fenced(lease, outcome.name, "fence_finish", params, closes=True) is not None


def write(lease: Lease, outcome: Outcome) -> bool:
    """Write how an attempt ended, alone and fenced; False once fenced.

    The worker writes succeeded and failed outcomes with its next claim
    (``finish_and_claim``); this is the one-run path, and the only one for
    a transient give-up and a wait for the user."""
    match outcome:
        case Succeeded() | Failed():
            return _finish(lease, outcome)
        case GaveUp(error=error):
            return give_up(lease, error)
        case Waiting(question=question, state=state, tool_seq=tool_seq, timeout=timeout):
            return wait_for_user(lease, question, state, tool_seq=tool_seq, timeout=timeout)
        case Suspended():
            return suspend(
                lease,
                outcome.reason,
                name=outcome.wait_name,
                until=outcome.until,
                timeout=outcome.timeout,
                state=outcome.state,
                tool_seq=outcome.tool_seq,
                match=outcome.match,
            )
        case Released(reason=reason):
            return release(lease, reason)
        case BudgetWait():
            return wait_for_budget(lease, outcome)
    raise TypeError(f"not an outcome: {outcome!r}")


def label(lease: Lease, outcome: Outcome, written: bool) -> Reported:
    """What the run became, for logs and metrics: succeeded, failed,
    requeued, waiting, or fenced when the write matched nothing."""
    if not written:
        return Reported.FENCED
    if isinstance(outcome, Released):
        return Reported.GIVEN_BACK
    if isinstance(outcome, BudgetWait):
        return Reported.BUDGET_WAIT
    if isinstance(outcome, GaveUp):
        # attempts has not moved since the claim: the same test the SQL makes.
        return Reported.FAILED if lease.attempt >= lease.run.max_attempts else Reported.REQUEUED
    return Reported(outcome.name)


def heartbeat_many(held: Sequence[Lease]) -> list[Lease]:
    """Renew every lease in one statement; the leases found fenced
    (``run.fenced`` recorded for each).

    A lease whose write lock is taken is being written right now (a finish,
    a checkpoint), which renews or ends it: it is skipped, never waited for.
    """
    if not held:
        return []
    with ExitStack() as locks:
        live = []
        for lease in held:
            if lease.write_lock.acquire(blocking=False):
                locks.callback(lease.write_lock.release)
                if not (lease.fenced or lease.closed):
                    live.append(lease)
        if not live:
            return []
        params = {
            "ids": [lease.run_id for lease in live],
            "epochs": [lease.epoch for lease in live],
            "tokens": [lease.token for lease in live],
            "lease_seconds": live[0].lease_seconds,
        }
        with prepared("fence_renew_many", params) as cursor:
            rows = cursor.fetchall()
        renewed = {run_id for run_id, _paused in rows}
        paused = {run_id for run_id, is_paused in rows if is_paused}
        for lease in live:
            if lease.run_id in paused:
                lease.pause()  # should its NOTIFY have been missed
        lost = [lease for lease in live if lease.run_id not in renewed]
        for lease in lost:
            record_fenced(lease, "heartbeat")
        return lost


def give_up(lease: Lease, exc: BaseException | None = None) -> bool:
    """Give the lease up after a transient error: requeued with backoff, or dead-lettered."""
    failure = failure_record(
        exc,
        classification=TRANSIENT,
        attempt=lease.attempt,
        message=f"transient error on the last attempt ({lease.attempt}): {exc}",
    )

    def write(row: tuple) -> None:
        _id, status, epoch, attempts, scheduled_for, _resumed, _promoted = row
        if status == RunStatus.FAILED:
            events.append(lease.run_id, events.FAILED, epoch, failure_summary(failure))
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

    # A handler's own delay (TransientError's retry_after) wins over the backoff.
    retry_after = exc.retry_after if isinstance(exc, TransientError) else None
    params = {
        "backoff_seconds": backoff(lease.attempt) if retry_after is None else retry_after,
        "failure": Jsonb(failure),
        "channel": get_settings().NOTIFY_CHANNEL,
    }
    return fenced(lease, "give_up", "fence_give_up", params, write, closes=True) is not None


def wait_for_user(
    lease: Lease,
    question: JSON,
    state: JSON = None,
    *,
    tool_seq: int = 0,
    timeout: float | None = None,
) -> bool:
    """End the turn waiting for the user; the run keeps its session slot.
    With ``timeout`` (seconds) the wait ends then, ``ctx.timed_out`` true."""
    Waiting.of(question, state, tool_seq, timeout)  # ValueError before anything is written

    def write(_row: tuple) -> None:
        if state is not None:
            save_checkpoint(lease, state, tool_seq, turn_end=True)
        events.append(lease.run_id, events.WAITING, lease.epoch, {"question": question})
        # A message waiting in the session's line is the answer, in order.
        answer_from_line(lease)

    params = {"timeout": timeout}
    return fenced(lease, "wait_for_user", "fence_wait", params, write, closes=True) is not None


def release(lease: Lease, reason: str, *, unstarted: bool = False) -> bool:
    """Give a run back unfinished (worker shutdown, a lease claimed ahead
    that waited too long): queued at once, the attempt returned, the epoch
    bumped so a handler still running is fenced. ``unstarted``: no handler
    ever ran on this lease, so the call its claim reserved on a budget was
    never made: it is refunded in the same transaction. Once a handler
    started, the call may have been made: the reservation stays counted."""

    def write(row: tuple) -> None:
        if unstarted:
            refund(lease)
        events.append(
            lease.run_id, events.REQUEUED, row[1], {"reason": reason, "attempt": lease.attempt}
        )
        notify(lease.run.priority)

    released = fenced(lease, "release", "fence_release", None, write, closes=True) is not None
    if released and unstarted:
        lease.reservations.clear()
    return released


def wait_for_budget(lease: Lease, outcome: BudgetWait) -> bool:
    """Give the run back until its next model call fits its budget: queued
    at once, the attempt handed back, the epoch bumped, the call (key,
    tokens) declared for the claim to reserve; the state saved as a
    checkpoint, from which the handler resumes holding the reservation."""

    def write(row: tuple) -> None:
        if outcome.state is not None:
            save_checkpoint(lease, outcome.state, outcome.tool_seq)
        events.append(
            lease.run_id,
            events.REQUEUED,
            row[1],
            {
                "reason": "budget",
                "attempt": lease.attempt,
                "budget": {"key": outcome.key, "tokens": outcome.tokens},
            },
        )
        notify(lease.run.priority)

    params = {"budget_key": outcome.key, "budget_tokens": outcome.tokens}
    return (
        fenced(lease, "budget.wait", "fence_budget_wait", params, write, closes=True) is not None
    )
