"""A handler's tool calls (``ctx.invoke_tool``) and their approvals, the
``RunContext`` part that records each call started and how it ended, and
replays what an earlier attempt or a person's decision recorded. The steps
of a call (``tool_begin``, ``tool_done``, ``tool_failed``,
``tool_interrupted``) are shared with ``AsyncRunContext``, which awaits the
tool itself between them, on the loop."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from runqueue import leases
from runqueue.db import db_now
from runqueue.errors import ApprovalPending, PermanentError, UncertainOutcome
from runqueue.leases.outcomes import ToolOutcome
from runqueue.models import Idempotency, ToolInvocation, ToolStatus
from runqueue.observability import observe
from runqueue.runtime.context_base import ContextBase
from runqueue.runtime.tools import (
    Approval,
    approval_of,
    approval_time_left,
    approved_arguments,
    call,
    jsonable,
    recorded_outcome,
    same_tool_call,
)
from runqueue.types import JSON


class ToolCalls(ContextBase):
    """``invoke_tool`` and the steps of a call."""

    def idempotency_key(self, seq: int) -> str:
        """A key for tool call ``seq`` that stays the same on every attempt."""
        return f"{self.run.id}:{seq}"

    def invoke_tool(
        self,
        name: str,
        fn: Callable[..., JSON],
        *,
        args: dict[str, JSON] | None = None,
        idempotency: str = Idempotency.NON_IDEMPOTENT,
        rerun_failed: bool = False,
        approval: bool | Callable[[dict[str, JSON]], object] | None = None,
        approval_timeout: float | dt.timedelta | None = None,
        on_timeout: str = "reject",
    ) -> ToolOutcome:
        """Run a side effect at most once per record (``runqueue.runtime``).
        ``rerun_failed``: a failure an earlier attempt recorded runs again
        instead of being replayed (an idempotent step such as a model
        request, whose failure is the attempt's, not the run's).
        ``approval`` (True, or a predicate of the arguments): a person
        decides before it runs (``runqueue.decide_tool``); until then the
        turn ends (``ApprovalPending``), holding no slot, and the decision
        is replayed on every later attempt. ``approval_timeout`` seconds
        without one: ``on_timeout`` "reject" (the call is rejected) or
        "fail" (the run fails for good)."""
        self.check()
        asked = approval_of(approval, approval_timeout, on_timeout)
        seq, recorded = self._number()
        with observe.tool(self.lease, name, idempotency) as traced:  # span, metrics
            begun = self.tool_begin(
                seq, recorded, name, args, Idempotency(idempotency), rerun_failed, asked
            )
            if isinstance(begun, ToolOutcome):
                outcome = begun
            else:
                call_args = begun
                try:
                    value = call(fn, call_args, self.idempotency_key(seq))
                except Exception as exc:  # noqa: BLE001 - a tool's failure is the handler's
                    outcome = self.tool_failed(seq, exc)
                else:
                    outcome = self.tool_done(seq, value)
            traced.done(outcome)
        return outcome

    # The steps of a tool call, shared with AsyncRunContext (which awaits the
    # tool itself between them, on the loop).

    def tool_begin(
        self,
        seq: int,
        recorded: ToolInvocation | None,
        name: str,
        args: dict[str, JSON] | None,
        idempotency: str,
        rerun_failed: bool = False,
        asked: Approval | None = None,
    ) -> ToolOutcome | dict[str, JSON]:
        """Call ``seq`` (``_number``): its recorded outcome if an earlier
        attempt (or a person's decision) has one (or ``fenced``); else
        record it started and return the arguments to run it with: those
        asked, or an approval's edited ones. A call that needs approval and
        has no decision yet raises ApprovalPending. PermanentError if the
        record is of another call."""
        if self.fenced:
            return ToolOutcome(status="fenced", seq=seq)
        asked_args = args or {}
        run_args = asked_args
        if recorded is not None:
            same_tool_call(recorded, name, args)
            decided = self._decided(recorded)
            if decided is None:
                return ToolOutcome(status="fenced", seq=seq)
            rerun = rerun_failed and decided.status == ToolStatus.FAILED
            if not rerun and decided.status != ToolStatus.APPROVED:
                replay = self._replay(decided)
                if replay is not None:
                    return replay
            run_args = approved_arguments(decided, asked_args)
            if decided.approval is not None:
                self._approvals[seq] = decided.approval
        elif asked is not None and asked.needed(asked_args):
            if not leases.record_tool_awaiting(
                self.lease,
                seq=seq,
                tool=name,
                idempotency=idempotency,
                arguments=asked_args,
                timeout=asked.timeout,
                on_timeout=asked.on_timeout,
            ):
                return ToolOutcome(status="fenced", seq=seq)
            raise ApprovalPending(self.lease.run_id, seq, name, asked.timeout)
        if not leases.record_tool_started(
            self.lease, seq=seq, tool=name, idempotency=idempotency, arguments=asked_args
        ):
            return ToolOutcome(status="fenced", seq=seq)
        return run_args

    def _decided(self, recorded: ToolInvocation) -> ToolInvocation | None:
        """The record of a call awaiting approval once it is decided: by a
        person, or by its deadline (``approval_timeout`` from when it was
        first asked, on the database's clock: its ``on_timeout``);
        ApprovalPending while it is not (waiting what is left of the
        deadline), PermanentError for ``on_timeout="fail"``; None once
        fenced. Any other record as is."""
        if recorded.status != ToolStatus.AWAITING_APPROVAL:
            return recorded
        asked = recorded.approval or {}
        left = approval_time_left(recorded, db_now())
        if left is None or left > 0:
            raise ApprovalPending(self.lease.run_id, recorded.seq, recorded.tool, left)
        if asked.get("on_timeout") == "fail":
            raise PermanentError(
                f"tool call #{recorded.seq} ({recorded.tool}) was not decided within "
                f"{asked.get('timeout'):g} s (on_timeout='fail')"
            )
        return leases.reject_timed_out(self.lease, recorded.seq)

    def tool_failed(self, seq: int, exc: BaseException) -> ToolOutcome:
        error = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, UncertainOutcome):
            leases.record_tool_outcome(
                self.lease, seq=seq, status=ToolStatus.UNCERTAIN, error=error
            )
            return ToolOutcome(
                status="uncertain", seq=seq, error=error, approval=self._approvals.pop(seq, None)
            )
        leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.FAILED, error=error)
        return ToolOutcome(
            status="failed", seq=seq, error=error, approval=self._approvals.pop(seq, None)
        )

    def tool_done(self, seq: int, value: JSON) -> ToolOutcome:
        value = jsonable(value)
        leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.COMPLETED, result=value)
        return ToolOutcome(
            status="completed", seq=seq, value=value, approval=self._approvals.pop(seq, None)
        )

    def tool_interrupted(self, seq: int, idempotency: str) -> None:
        """Cancellation cut the call short: a non-idempotent call may or may
        not have happened (``uncertain``, if the lease still allows the write;
        a cancel marks it so itself); an idempotent one stays ``started`` and
        runs again on the next attempt."""
        if idempotency == Idempotency.IDEMPOTENT:
            return
        error = {
            "type": "RunCancelled",
            "message": f"the call was interrupted ({self.lease.cancel_reason or 'cancelled'}): "
            "it may or may not have happened",
        }
        leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.UNCERTAIN, error=error)

    def _replay(self, recorded: ToolInvocation) -> ToolOutcome | None:
        """The outcome recorded by an earlier attempt, or None to run again."""
        seq = recorded.seq
        if (outcome := recorded_outcome(recorded)) is not None:
            return outcome
        if recorded.idempotency == Idempotency.IDEMPOTENT:
            return None  # started, outcome unknown, safe to run again
        error = {
            "type": "UncertainOutcome",
            "message": f"{recorded.tool} started on epoch {recorded.lease_epoch} and its "
            "worker was lost before recording the outcome: it may or may not have happened",
        }
        if not leases.record_tool_outcome(
            self.lease, seq=seq, status=ToolStatus.UNCERTAIN, error=error
        ):
            return ToolOutcome(status="fenced", seq=seq)
        return ToolOutcome(status="uncertain", seq=seq, error=error)
