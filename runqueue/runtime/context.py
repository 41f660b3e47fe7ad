"""``RunContext``: what a sync handler sees of its run, and the only way
it writes."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from runqueue import leases
from runqueue.capacity import budgets
from runqueue.db import db_now
from runqueue.errors import (
    ApprovalPending,
    ChildrenGone,
    PermanentError,
    RunCancelled,
    RunPaused,
    UncertainOutcome,
)
from runqueue.history import usage
from runqueue.leases.outcomes import (
    BudgetWait,
    ToolOutcome,
    positive_seconds,
    wake_time,
)
from runqueue.leases.turns import turn_payloads
from runqueue.models import (
    Idempotency,
    Run,
    ToolInvocation,
    ToolStatus,
    WaitReason,
)
from runqueue.observability import observe
from runqueue.runtime.interrupted import Interrupted
from runqueue.runtime.returns import AskUser, Wait
from runqueue.runtime.tools import (
    PATCH_TOOL,
    Approval,
    approval_of,
    approval_time_left,
    approved_arguments,
    call,
    is_patch,
    jsonable,
    patch_name_problem,
    recorded_outcome,
    respawned,
    same_tool_call,
)
from runqueue.schedules import owned
from runqueue.stream.emit import emit as stream_emit
from runqueue.stream.text import TurnText
from runqueue.submission import spawning
from runqueue.types import JSON
from runqueue.validation import check_state


class RunContext:
    """What a handler sees of its run, and the only way it writes."""

    def __init__(
        self,
        lease: leases.Lease,
        *,
        state: JSON,
        tool_seq: int,
        recorded: dict[int, ToolInvocation],
        interrupted: Interrupted | None = None,
    ) -> None:
        self.lease = lease
        self.state = state
        self._seq = tool_seq
        self._recorded = recorded
        self.text = TurnText(lease)
        self._usage = usage.Recorder()
        self._interrupted = interrupted
        #: The approvals of the calls running now, by number: their outcome carries it.
        self._approvals: dict[int, JSON] = {}

    @property
    def interrupted(self) -> Interrupted | None:
        """What the run this turn interrupted had done (``on_busy=
        "interrupt"``): its id, payload, last checkpoint, finished tool
        calls and streamed text; None for any other run."""
        return self._interrupted

    @property
    def payloads(self) -> list[JSON]:
        """The payloads of the submits this turn answers, in order: several
        when ``on_busy="merge"`` joined them, else ``[ctx.payload]``."""
        return turn_payloads(self.lease.run)

    @property
    def run(self) -> Run:
        return self.lease.run

    @property
    def payload(self) -> JSON:
        return self.lease.run.payload

    @property
    def input(self) -> JSON:
        """Input delivered on resume (the user's answer, a signal's data), or None."""
        return self.lease.run.input

    @property
    def timed_out(self) -> bool:
        """The last wait (a signal's, the user's) ended at its deadline."""
        return self.lease.run.timed_out

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    @property
    def fenced(self) -> bool:
        """True once another worker owns the run: stop, nothing more is written."""
        return self.lease.fenced

    @property
    def cancelled(self) -> threading.Event:
        """Set once the handler must stop (the run was cancelled or lost, or the
        worker is stopping): wait on it, or hand it to a client that can."""
        return self.lease.cancelled

    def check(self) -> None:
        """Raise ``RunCancelled`` if the handler must stop, ``RunPaused`` if
        the run was paused (every ctx call does: its steps' boundary)."""
        if self.lease.cancelled.is_set():
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason)
        if self.lease.paused:
            raise RunPaused(self.lease.run_id)

    def heartbeat(self) -> bool:
        self.check()
        return leases.heartbeat(self.lease)

    def checkpoint(self, state: JSON) -> bool:
        """Save ``state``; a later attempt resumes with it as ``ctx.state``."""
        self.check()
        return self._checkpoint_at(state, self._seq)

    def _checkpoint_at(self, state: JSON, tool_seq: int) -> bool:
        """``checkpoint`` after the first ``tool_seq`` calls (the number the
        async context read when the handler made the call)."""
        ok = leases.checkpoint(self.lease, state, tool_seq=tool_seq)
        if ok:
            self.state = state
        return ok

    def emit(self, event_type: str, data: dict[str, JSON] | None = None) -> bool:
        """Publish a progress event to the run's stream (through the fence);
        False once fenced. ValueError for a reserved type or oversized data."""
        self.check()
        return stream_emit(self.lease, event_type, data)

    def stream(self, text: str) -> bool:
        """Send a text delta to the run's live stream clients (no row per
        delta: ``runqueue.stream.text``); False once fenced. TypeError or
        ValueError for text that is not a str or holds NUL."""
        self.check()
        return self.text.stream(text)

    def ask_user(
        self, question: JSON, state: JSON = None, timeout: float | dt.timedelta | None = None
    ) -> AskUser:
        """Return this from the handler to wait for the user's answer; with
        ``timeout`` (seconds or a timedelta) at most that long, then it
        resumes with ``ctx.timed_out`` true and ``ctx.input`` None."""
        self.check()
        return AskUser(
            question=question,
            state=self.state if state is None else state,
            timeout=positive_seconds(timeout),
        )

    def spawn(
        self,
        kind: str,
        payload: JSON = None,
        *,
        priority: int | None = None,
        concurrency_key: str | None = None,
        session_id: str | None = None,
    ) -> uuid.UUID:
        """Create a child run; its id. Recorded in order like a tool call,
        through the fence: a handler run again gets the same child back and
        never makes a second; a fenced handler makes none (RunCancelled)."""
        self.check()
        seq, recorded = self._number()
        return self._spawn_numbered(
            seq,
            recorded,
            kind,
            payload,
            priority=priority,
            concurrency_key=concurrency_key,
            session_id=session_id,
        )

    def _number(self) -> tuple[int, ToolInvocation | None]:
        """The next call's number, and its record from an earlier attempt if
        there is one. Taken when the handler makes the call (for an async
        handler: on the loop, before anything is awaited), so the numbers
        follow the order of the calls whatever order they are run in."""
        seq = self._seq
        self._seq += 1
        return seq, self._recorded.pop(seq, None)

    def _spawn_numbered(
        self,
        seq: int,
        recorded: ToolInvocation | None,
        kind: str,
        payload: JSON = None,
        *,
        priority: int | None = None,
        concurrency_key: str | None = None,
        session_id: str | None = None,
    ) -> uuid.UUID:
        """``spawn`` as call ``seq``: the recorded child, or a new one."""
        if recorded is not None:
            return respawned(recorded, kind, payload)
        child = spawning.spawn(
            self.lease,
            seq,
            kind=kind,
            payload=payload,
            priority=priority,
            concurrency_key=concurrency_key,
            session_id=session_id,
        )
        if child is None:
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason or "fenced")
        return child

    def schedule(
        self,
        kind: str,
        payload: JSON = None,
        *,
        cron: str | None = None,
        timezone: str | None = None,
        run_at: dt.datetime | dt.timedelta | None = None,
        session_id: str | None = None,
        on_busy: str | None = None,
        priority: int | None = None,
        overlap: str | None = None,
        runs_may_schedule: bool = False,
    ) -> uuid.UUID:
        """Make a schedule in this run's tenant: ``cron`` (in ``timezone``)
        or once at ``run_at`` (a datetime, or a timedelta from now), its
        runs ``kind`` with ``payload``, turns of ``session_id`` if given;
        its id (the one ``/api/schedules/<id>/`` shows). Recorded in order
        like a tool call: a handler run again gets the same schedule back.
        ScheduleRefused in a run a schedule started, unless that schedule
        allows it (docs/handlers-runs.md, "Schedules from a handler")."""
        self.check()
        seq, recorded = self._number()
        return self._schedule_numbered(
            seq,
            recorded,
            kind=kind,
            payload=payload,
            cron_expr=cron,
            timezone=timezone,
            run_at=run_at,
            session_id=session_id,
            on_busy=on_busy,
            priority=priority,
            overlap=overlap,
            runs_may_schedule=runs_may_schedule,
        )

    def _schedule_numbered(
        self, seq: int, recorded: ToolInvocation | None, **options: Any
    ) -> uuid.UUID:
        """``schedule`` as call ``seq``: the recorded schedule, or a new one."""
        if recorded is not None:
            return owned.replayed(recorded, options["kind"])
        made = owned.create_for_run(self.lease, seq, **options)
        if made is None:
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason or "fenced")
        return made

    def patched(self, name: str) -> bool:
        """Branch in place for a change of code: True when this run reaches
        this point for the first time in code that has the patch ``name``
        (the decision is recorded as a step, so every later attempt gets
        True again); False when the run recorded another step here, made by
        code without the patch, so its replay takes the old path. ValueError
        for a name that is not 1-255 characters of text."""
        self.check()
        seq, known = self._patch_number(name)
        return known if known is not None else self._record_patch(seq, name)

    def _patch_number(self, name: str) -> tuple[int, bool | None]:
        """The patch decision at the next call's number: True or False when
        the run's records decide it, None when it is decided now, as call
        ``seq`` (``_record_patch``). A False takes no number: the recorded
        step here is the old code's next call."""
        if (problem := patch_name_problem(name)) is not None:
            raise ValueError(f"a patch's name {problem}")
        seq = self._seq
        recorded = self._recorded.get(seq)
        if recorded is not None and not is_patch(recorded, name):
            return seq, False
        self._seq += 1
        if recorded is not None:
            del self._recorded[seq]
            return seq, True
        return seq, None

    def _record_patch(self, seq: int, name: str) -> bool:
        """Record that this run took patch ``name`` as call ``seq``; True.
        A fenced handler records nothing (RunCancelled)."""
        if not leases.record_step(
            self.lease, seq=seq, tool=PATCH_TOOL, arguments={"name": name}, result=True
        ):
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason or "fenced")
        return True

    def steers(self) -> list[JSON]:
        """The messages sent to steer this turn (``on_busy="steer"``) since
        it last looked, oldest first; [] when there are none. Call it at a
        step boundary (an agent adapter does, before each model request).
        Taking messages is a step of the run: a retry gets the same
        messages at the same point, and a fenced worker takes none
        (RunCancelled). A point that found none takes no step, so a retry
        finds none there either; a message not taken before the turn ends
        runs as the session's next turn."""
        self.check()
        seq = self._seq
        recorded = self._recorded.get(seq)
        if recorded is not None:
            if recorded.tool != leases.STEERS_TOOL:
                return []  # the first attempt found none here
            del self._recorded[seq]
            self._seq += 1
            result = recorded.result if isinstance(recorded.result, dict) else {}
            return list(result.get("payloads") or [])
        if not leases.has_steers(self.run):
            return []
        taken = leases.take_steers(self.lease, seq)
        if taken is None:
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason or "fenced")
        if taken:
            self._seq += 1
        return taken

    def children(self) -> list[Run]:
        """The runs this run spawned, in spawn order, as they are now: every
        one of them, or ChildrenGone naming those that cannot be found
        (retention keeps a run while an ancestor is live, so only a delete
        does that): a fan-in never goes on with part of its children."""
        records = ToolInvocation.objects.filter(
            run_id=self.run.id, tool=leases.SPAWN_TOOL
        ).order_by("seq")
        results = records.values_list("result", flat=True)
        ids = [uuid.UUID(str(r["run_id"])) for r in results if isinstance(r, dict)]
        runs = Run.objects.in_bulk(ids)
        if missing := [i for i in ids if i not in runs]:
            raise ChildrenGone(self.run.id, missing, len(ids))
        return [runs[i] for i in ids]

    def wait_for_children(self, state: JSON = None) -> Wait:
        """Return this from the handler to end the turn until every child
        it spawned is terminal; it resumes once, ``ctx.children()`` then
        gives them. No child open: it resumes at once."""
        self.check()
        return Wait(reason=WaitReason.CHILDREN, state=self._state(state))

    def wait_for_signal(
        self,
        name: str,
        *,
        timeout: float | dt.timedelta | None = None,
        state: JSON = None,
    ) -> Wait:
        """Return this from the handler to end the turn until signal
        ``name`` comes (``runqueue.signal``; its data is ``ctx.input``), or
        ``timeout`` passes (``ctx.timed_out``). A signal sent earlier, even
        before the run started, was kept for it and ends the wait at once."""
        self.check()
        if (problem := leases.signal_name_problem(name)) is not None:
            raise ValueError(f"a signal's name {problem}")
        return Wait(
            reason=WaitReason.SIGNAL,
            state=self._state(state),
            name=name,
            timeout=positive_seconds(timeout),
        )

    def wait_for_event(
        self,
        name: str,
        *,
        match: dict[str, JSON] | None = None,
        timeout: float | dt.timedelta | None = None,
        state: JSON = None,
    ) -> Wait:
        """Return this from the handler to end the turn until an inbound
        event ``name`` of the run's tenant whose data contains ``match``
        (PostgreSQL's jsonb ``@>``; ``{}`` or None: any) arrives, or
        ``timeout`` passes (``ctx.timed_out``). The event is ``ctx.input``
        (name, key, data, received_at). One received within
        ``EVENT_RETENTION_SECONDS`` before the wait, and not taken by this
        run yet, ends it at once: an event that came first is not lost."""
        self.check()
        if (problem := leases.signal_name_problem(name)) is not None:
            raise ValueError(f"an event's name {problem}")
        match = {} if match is None else match
        if (problem := leases.event_match_problem(match)) is not None:
            raise ValueError(f"an event wait's match {problem}")
        return Wait(
            reason=WaitReason.EVENT,
            state=self._state(state),
            name=name,
            timeout=positive_seconds(timeout),
            match=match,
        )

    def sleep_until(self, when: dt.datetime, state: JSON = None) -> Wait:
        """Return this from the handler to end the turn until ``when`` (an
        aware datetime, compared with the database's clock, at most
        9999-12-31 in UTC; ValueError if not)."""
        self.check()
        return Wait(reason=WaitReason.TIMER, state=self._state(state), until=wake_time(when))

    def _state(self, state: JSON) -> JSON:
        return self.state if state is None else state

    def reserve(self, key: str, tokens: int) -> bool:
        """Reserve one request and ``tokens`` on budget ``key`` for a further
        model call: True when it fits now (settle it after the call); when
        it does not, return ``ctx.wait_for_budget(key, tokens)``."""
        self.check()
        key, tokens = budgets.declared("reserve", key, tokens)
        return leases.reserve(self.lease, key, tokens)

    def settle(self, *, tokens: int, key: str | None = None) -> int | None:
        """Correct the oldest unsettled reservation (the claim's, or a
        ``reserve``'s; of ``key`` if given) to the tokens the call used: the
        difference is refunded or charged. Returns it; None once fenced."""
        self.check()
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"settle: tokens must be an integer >= 0, got {tokens!r}")
        return leases.settle(self.lease, tokens, key)

    def wait_for_budget(self, key: str, tokens: int, state: JSON = None) -> BudgetWait:
        """Return this from the handler when ``reserve`` said no: the run
        gives its slot back (no attempt used) and is claimed again once one
        request and ``tokens`` are reserved on ``key``; the handler then
        resumes from ``state`` (``ctx.state``) holding that reservation."""
        self.check()
        return self._wait_for_budget_at(key, tokens, state, self._seq)

    def _wait_for_budget_at(self, key: str, tokens: int, state: JSON, tool_seq: int) -> BudgetWait:
        """``wait_for_budget`` after the first ``tool_seq`` calls."""
        key, tokens = budgets.declared("wait_for_budget", key, tokens)
        state = self.state if state is None else state
        check_state(state)
        return BudgetWait(key, tokens, state, tool_seq)

    def record_usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | Decimal | None = None,
    ) -> Decimal | None:
        """Record one model call's tokens and cost (None: priced from
        ``RUNQUEUE["PRICES"]``, per million tokens; unknown for a model
        without a price); the cost recorded. Written without the fence, so
        it counts even once the run is lost or cancelled, and never twice
        for one call. ValueError for bad input; SpendCapReached (a
        PermanentError) once the run's tree reached its spend cap, whose
        live runs are then cancelled (docs/decisions/run-trees.md, "Usage and cost")."""
        checked = usage.checked(model, input_tokens, output_tokens, cost)
        return self._record_usage_numbered(self._usage.number(), *checked)

    def _record_usage_numbered(
        self, call: int, model: str, input_tokens: int, output_tokens: int, cost: Decimal | None
    ) -> Decimal | None:
        """``record_usage`` as the lease's call number ``call``."""
        lease = self.lease
        recorded = usage.record(
            lease.run,
            epoch=lease.epoch,
            token=lease.token,
            attempt=lease.attempt,
            call=call,
            root=self._usage.root(lease.run_id),
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost,
        )
        if recorded.counted:
            observe.usage(lease, model, input_tokens, output_tokens, cost)
        if recorded.capped:
            raise usage.end_capped_tree(recorded)
        return cost

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
