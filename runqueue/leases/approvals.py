"""Tool calls that wait for a person: the worker's record of a call
awaiting approval, the decision written into it (``decide_tool``), and the
rejection a wait's deadline makes.

A decision takes the run's row lock first (``lock_run``), as a signal does,
and every worker write takes it too (the fence's UPDATE): so a decision and
the worker's record, a timeout's rejection or the end of the turn never
interleave, and of two racing deciders the second finds the call decided.
The decision wakes the run through its signal (``approval_signal``): the
run waiting for it is queued again, or, when it has not begun to wait yet,
the signal waits in its mailbox and the wait ends at once.
"""

from __future__ import annotations

import uuid

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from runqueue import events
from runqueue.conf import get_settings
from runqueue.db import db_now
from runqueue.errors import (
    InvalidArgument,
    InvalidTransition,
    NotAwaitingApproval,
    ToolCallNotFound,
)
from runqueue.leases.base import Lease, lock_run, notify, retry_moved
from runqueue.leases.calls import record_call
from runqueue.leases.fence import fenced, renew_params
from runqueue.leases.transitions import checked_operation
from runqueue.models import (
    TERMINAL_STATUSES,
    Run,
    RunStatus,
    Signal,
    ToolDecision,
    ToolInvocation,
    ToolStatus,
)
from runqueue.sql import execute
from runqueue.types import JSON
from runqueue.validation import json_text

#: What a wait's deadline does to a call still awaiting approval.
ON_TIMEOUT = ("reject", "fail")
#: The actor of a rejection made by the deadline.
TIMEOUT_ACTOR = "runqueue:timeout"
#: The largest tool call number (the column is an integer).
SEQ_MAX = 2**31 - 1

#: The status each decision leaves the call in.
_STATUS = {
    ToolDecision.APPROVE: ToolStatus.APPROVED,
    ToolDecision.EDIT: ToolStatus.APPROVED,
    ToolDecision.REJECT: ToolStatus.REJECTED,
    ToolDecision.RESPOND: ToolStatus.COMPLETED,
}


def approval_signal(seq: int) -> str:
    """The signal a decision on call ``seq`` sends, and its wait names."""
    return f"runqueue.approval:{seq}"


def record_tool_awaiting(
    lease: Lease,
    *,
    seq: int,
    tool: str,
    idempotency: str,
    arguments: JSON,
    timeout: float | None,
    on_timeout: str,
) -> bool:
    """Record a call as awaiting approval, not run; False once fenced."""
    approval: JSON = {"timeout": timeout, "on_timeout": on_timeout, "decided": None}
    shown: dict[str, JSON] = {"timeout": timeout}
    status = ToolStatus.AWAITING_APPROVAL
    return record_call(lease, seq, status, tool, idempotency, arguments, shown, approval=approval)


def reject_timed_out(lease: Lease, seq: int) -> ToolInvocation | None:
    """The deadline's rejection of call ``seq`` (its ``on_timeout`` is
    ``reject``), unless a person decided it first: the record as it is
    then; None once fenced."""

    def write(_row: tuple) -> None:
        tool = ToolInvocation.objects.get(run_id=lease.run_id, seq=seq)
        if tool.status != ToolStatus.AWAITING_APPROVAL:
            return  # decided by a person meanwhile: that decision stands
        seconds = (tool.approval or {}).get("timeout")
        reason = f"no decision within {seconds:g} s" if seconds else "no decision in time"
        decided = _decided(ToolDecision.REJECT, TIMEOUT_ACTOR, reason, None, None)
        _apply(tool, decided)
        events.append(lease.run_id, events.TOOL_DECIDED, lease.epoch, _event(tool, decided))

    if fenced(lease, "tool.decided", "fence_renew", renew_params(lease), write) is None:
        return None
    return ToolInvocation.objects.get(run_id=lease.run_id, seq=seq)


def decide_tool(
    run_id: uuid.UUID | str,
    seq: int,
    decision: str,
    *,
    actor: str,
    reason: str = "",
    arguments: dict[str, JSON] | None = None,
    result: JSON = None,
) -> ToolInvocation:
    """Decide tool call ``seq`` of a run, which awaits approval: approve it,
    ``edit`` (approve with ``arguments`` instead of those asked), ``reject``
    (``reason`` is what the handler and its model are told) or ``respond``
    (``result`` stands for the call, which never runs). Applied once: the
    run resumes and the call replays the decision on every later attempt.
    The same decision again (a client's retry) returns the record as it is;
    another raises NotAwaitingApproval, as does a call that needed none.
    InvalidArgument for bad input (nothing written), RunNotFound,
    ToolCallNotFound, InvalidTransition for a finished run."""
    parsed = checked_operation("decide_tool", run_id, actor=actor, reason=reason)
    decided = _checked_decision(seq, decision, actor, reason, arguments, result)
    return retry_moved(lambda: _decide(parsed, seq, decided))


def _checked_decision(
    seq: object,
    decision: object,
    actor: str,
    reason: str,
    arguments: object,
    result: JSON,
) -> dict[str, JSON]:
    """The decision as it is recorded; InvalidArgument naming what is wrong."""

    def bad(name: str, message: str) -> InvalidArgument:
        return InvalidArgument("decide_tool", name, message)

    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= SEQ_MAX:
        raise bad("seq", f"must be an integer from 0 to {SEQ_MAX}, got {seq!r}")
    if decision not in ToolDecision.values:
        raise bad("decision", f"must be one of {', '.join(ToolDecision.values)}, got {decision!r}")
    if not actor:
        raise bad("actor", "must not be empty")
    if (arguments is not None) != (decision == ToolDecision.EDIT):
        raise bad("arguments", "are given with an edit, and only with one")
    if decision == ToolDecision.EDIT and not isinstance(arguments, dict):
        raise bad("arguments", f"must be a JSON object, got {type(arguments).__name__}")
    if result is not None and decision != ToolDecision.RESPOND:
        raise bad("result", "is given with respond, and only with it")
    limit = get_settings().MAX_PAYLOAD_BYTES
    for name, value in (("arguments", arguments), ("result", result)):
        try:
            text = json_text(value, name)
        except ValueError as exc:
            raise bad(name, str(exc)) from None
        if len(text.encode()) > limit:
            raise bad(name, f"must be at most {limit} bytes as JSON")
    edited = arguments if isinstance(arguments, dict) else None
    return _decided(ToolDecision(decision), actor, reason, edited, result)


def _decided(
    decision: ToolDecision,
    actor: str,
    reason: str,
    arguments: dict[str, JSON] | None,
    result: JSON,
) -> dict[str, JSON]:
    decided: dict[str, JSON] = {"decision": str(decision), "actor": actor, "reason": reason}
    if decision == ToolDecision.EDIT:
        decided["arguments"] = arguments
    if decision == ToolDecision.RESPOND:
        decided["result"] = result
    return decided


def _decide(run_id: uuid.UUID, seq: int, decided: dict[str, JSON]) -> ToolInvocation:
    with transaction.atomic(durable=True):
        status, wait_reason, wait_name, priority = lock_run(run_id)
        tool = ToolInvocation.objects.filter(run_id=run_id, seq=seq).first()
        if tool is None:
            raise ToolCallNotFound(run_id, seq)
        if tool.status != ToolStatus.AWAITING_APPROVAL:
            before = (tool.approval or {}).get("decided")
            if isinstance(before, dict) and _same(before, decided):
                return tool  # the same decision again: a retry, answered as the first
            raise NotAwaitingApproval(run_id, seq, tool.status, before)
        if status in TERMINAL_STATUSES:
            raise InvalidTransition(run_id, status, "decide a tool call of")
        _apply(tool, decided)
        epoch = _wake(run_id, seq, status, wait_reason, wait_name, priority, decided)
        events.append(run_id, events.TOOL_DECIDED, epoch, _event(tool, decided))
    return tool


def _same(before: dict[str, JSON], decided: dict[str, JSON]) -> bool:
    return {k: v for k, v in before.items() if k != "at"} == decided


def _apply(tool: ToolInvocation, decided: dict[str, JSON]) -> None:
    """Write ``decided`` into the record (the caller holds the run's lock)."""
    decision = ToolDecision(str(decided["decision"]))
    now = db_now()
    approval = dict(tool.approval or {})
    approval["decided"] = {**decided, "at": now.isoformat()}
    tool.approval = approval
    tool.status = _STATUS[decision]
    fields = ["approval", "status"]
    if decision == ToolDecision.REJECT:
        tool.error = {"type": "ToolRejected", "message": rejection_message(approval)}
        fields.append("error")
    if decision == ToolDecision.RESPOND:
        tool.result = decided["result"]
        fields.append("result")
    if decision in (ToolDecision.REJECT, ToolDecision.RESPOND):
        tool.finished_at = now
        fields.append("finished_at")
    tool.save(update_fields=fields)


def rejection_message(approval: dict[str, JSON]) -> str:
    """What a rejected call tells the handler (and its model)."""
    decided = approval.get("decided")
    reason = decided.get("reason") if isinstance(decided, dict) else None
    return f"The call was rejected: {reason}" if reason else "The call was rejected."


def _event(tool: ToolInvocation, decided: dict[str, JSON]) -> dict[str, JSON]:
    return {
        "seq": tool.seq,
        "tool": tool.tool,
        "decision": decided["decision"],
        "actor": decided["actor"],
        "reason": decided["reason"],
    }


def _wake(
    run_id: uuid.UUID,
    seq: int,
    status: str,
    wait_reason: str | None,
    wait_name: str | None,
    priority: int,
    decided: dict[str, JSON],
) -> int:
    """Resume the run waiting for this decision, or keep its signal in the
    mailbox for the wait its worker is about to begin; the run's epoch."""
    name = approval_signal(seq)
    data = {"approval": seq, "decision": decided["decision"]}
    with connection.cursor() as cursor:
        if status == RunStatus.WAITING and (wait_reason, wait_name) == ("signal", name):
            params = {"run_id": run_id, "name": name, "data": Jsonb(data)}
            _id, epoch = execute(cursor, "resume_signal", params).fetchone()
            events.append(run_id, events.RESUMED, epoch, {"reason": "approval", "name": name})
            notify(priority)
            return int(epoch)
    if status == RunStatus.RUNNING:
        # Its worker may be about to end the turn waiting for this decision:
        # the mailbox keeps the signal for that wait (outside the cap on a
        # client's signals, so a decision is never refused for room). A run
        # queued or waiting for something else reads the decision from the
        # record when it replays the call.
        Signal.objects.create(run_id=run_id, name=name, data=data)
    return Run.objects.values_list("lease_epoch", flat=True).get(id=run_id)
