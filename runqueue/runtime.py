"""The handler runtime: the RunContext a handler gets, and running a lease.

A handler is ``fn(ctx) -> result``, or ``async def fn(ctx)`` (run on the
process's event loop, ``runqueue.aio``, with ``AsyncRunContext``: the same
calls, awaited). It resumes from its last checkpoint
(``ctx.state``); tool invocations recorded by an earlier attempt are replayed
from their records instead of running again, and the one left ``started`` is
decided by its idempotency class: an idempotent tool runs again, a
non-idempotent one becomes ``uncertain`` and the handler is told so.
Once the lease is lost, nothing more is written or run for this attempt.

Cancellation reaches the handler: when the run is cancelled (a NOTIFY tells
the worker at once), its lease is found fenced, or the worker is stopping,
``ctx.cancelled`` (a ``threading.Event``) is set, every ctx call after it
raises ``RunCancelled``, and an async handler gets ``CancelledError`` at
its current ``await``. The fence still decides what may be written.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

from django.db import InterfaceError, OperationalError
from django.utils.module_loading import import_string

from runqueue import aio, budgets, events, leases, registry, spawning, usage
from runqueue.conf import get_settings
from runqueue.db import connection_lost
from runqueue.errors import (
    MAX_DURATION,
    PERMANENT,
    ChildrenGone,
    PermanentError,
    RunCancelled,
    UncertainOutcome,
    UnknownKind,
    classify,
)
from runqueue.failures import failure_record, permanent_failure
from runqueue.models import (
    Checkpoint,
    Idempotency,
    Run,
    RunEvent,
    ToolInvocation,
    ToolStatus,
    WaitReason,
)
from runqueue.observability import observe
from runqueue.outcomes import (
    BudgetWait,
    Failed,
    GaveUp,
    Outcome,
    Released,
    Succeeded,
    Suspended,
    ToolOutcome,
    Waiting,
    positive_seconds,
    wake_time,
)
from runqueue.stream.emit import emit as stream_emit
from runqueue.stream.text import TurnText
from runqueue.turns import turn_payloads
from runqueue.types import JSON
from runqueue.validation import json_text, text_problem

logger = logging.getLogger("runqueue.runtime")


@dataclass(frozen=True, slots=True)
class AskUser:
    """Returned by a handler (via ``ctx.ask_user``) to end the turn waiting for input."""

    question: JSON
    state: JSON
    timeout: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """Returned by a handler (via ``ctx.wait_for_children``,
    ``ctx.wait_for_signal`` or ``ctx.sleep_until``) to end the turn waiting."""

    reason: str
    state: JSON
    name: str = ""
    until: dt.datetime | None = None
    timeout: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedTool:
    """A tool call (or spawn) an interrupted run finished: how it ended
    (completed, failed, or uncertain: it may or may not have happened)."""

    seq: int
    tool: str
    status: str
    arguments: JSON
    result: JSON
    error: JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    """What the run this one interrupted (``on_busy="interrupt"``) had done
    when it was cancelled, as ``ctx.interrupted`` shows it: its id and
    payload, its last checkpoint's state, the tool calls it finished, and
    the text it streamed in its last attempt (as far as it was made
    durable). Nothing the old turn finished runs again unless the handler
    does it again (docs/decisions.md, "Busy sessions: on_busy")."""

    run_id: uuid.UUID
    payload: JSON
    state: JSON
    tools: tuple[FinishedTool, ...]
    text: str


def interrupted_of(run_id: uuid.UUID) -> Interrupted | None:
    """What run ``run_id`` had done (``Interrupted``), or None if it is gone."""
    run = Run.objects.filter(id=run_id).values("payload").first()
    if run is None:
        return None
    last = Checkpoint.objects.filter(run_id=run_id).order_by("-seq").first()
    tools = tuple(
        FinishedTool(
            seq=t.seq,
            tool=t.tool,
            status=t.status,
            arguments=t.arguments,
            result=t.result,
            error=t.error,
        )
        for t in ToolInvocation.objects.filter(run_id=run_id)
        .exclude(status=ToolStatus.STARTED)
        .order_by("seq")
    )
    return Interrupted(
        run_id=run_id,
        payload=run["payload"],
        state=last.state if last else None,
        tools=tools,
        text=_last_attempt_text(run_id),
    )


def _last_attempt_text(run_id: uuid.UUID) -> str:
    """The durable text (``run.text`` chunks) of the run's last attempt:
    each chunk where its offset puts it, a chunk seen twice written once."""
    logged = RunEvent.objects.filter(run_id=run_id)
    claimed = (
        logged.filter(type=events.CLAIMED).order_by("-id").values_list("id", flat=True).first()
    )
    chunks = logged.filter(type=events.TEXT, id__gt=claimed or 0).order_by("id")
    text = ""
    for data in chunks.values_list("data", flat=True):
        offset, piece = int(data.get("offset", 0)), str(data.get("text", ""))
        text = text[:offset] + piece if offset <= len(text) else text
    return text


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
        return turn_payloads(self.lease.run.payload)

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
        """Raise ``RunCancelled`` if the handler must stop (every ctx call does)."""
        if self.lease.cancelled.is_set():
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason)

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
            return _respawned(recorded, kind, payload)
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
        if recorded is not None and not _is_patch(recorded, name):
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
        json_text(state, "checkpoint state")
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
        live runs are then cancelled (docs/decisions.md, "Usage and cost")."""
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
    ) -> ToolOutcome:
        """Run a side effect at most once per record; see the module docstring."""
        self.check()
        seq, recorded = self._number()
        with observe.tool(self.lease, name, idempotency) as traced:  # span, metrics
            begun = self.tool_begin(seq, recorded, name, args, Idempotency(idempotency))
            if isinstance(begun, ToolOutcome):
                outcome = begun
            else:
                call_args = begun
                try:
                    value = _call(fn, call_args, self.idempotency_key(seq))
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
    ) -> ToolOutcome | dict[str, JSON]:
        """Call ``seq`` (``_number``): its recorded outcome if an earlier
        attempt has one (or ``fenced``); else record it started and return
        the arguments to run it with. PermanentError if the record is of
        another call."""
        if self.fenced:
            return ToolOutcome(status="fenced", seq=seq)
        if recorded is not None:
            _same_tool_call(recorded, name, args)
            replay = self._replay(recorded)
            if replay is not None:
                return replay
        args = args or {}
        if not leases.record_tool_started(
            self.lease, seq=seq, tool=name, idempotency=idempotency, arguments=args
        ):
            return ToolOutcome(status="fenced", seq=seq)
        return args

    def tool_failed(self, seq: int, exc: BaseException) -> ToolOutcome:
        error = {"type": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, UncertainOutcome):
            leases.record_tool_outcome(
                self.lease, seq=seq, status=ToolStatus.UNCERTAIN, error=error
            )
            return ToolOutcome(status="uncertain", seq=seq, error=error)
        leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.FAILED, error=error)
        return ToolOutcome(status="failed", seq=seq, error=error)

    def tool_done(self, seq: int, value: JSON) -> ToolOutcome:
        value = _jsonable(value)
        leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.COMPLETED, result=value)
        return ToolOutcome(status="completed", seq=seq, value=value)

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
        if recorded.status == ToolStatus.COMPLETED:
            return ToolOutcome(status="completed", seq=seq, value=recorded.result, replayed=True)
        if recorded.status == ToolStatus.FAILED:
            return ToolOutcome(status="failed", seq=seq, error=recorded.error, replayed=True)
        if recorded.status == ToolStatus.UNCERTAIN:
            return ToolOutcome(
                status="uncertain",
                seq=seq,
                error=recorded.error,
                replayed=True,
                resolution=recorded.resolution,
            )
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


class AsyncRunContext:
    """What an ``async def`` handler sees: ``RunContext``'s calls, awaited.

    Each write runs the sync context's own fenced code on a database thread
    (``runqueue.aio.db``), so its semantics are the same by construction;
    an async tool is awaited on the loop between its start and outcome
    records. ``ctx.cancelled`` and ``RunCancelled`` behave as in a sync
    handler, and the handler's task is cancelled at its current ``await``.

    ``spawn`` and ``invoke_tool`` (and ``checkpoint`` and
    ``wait_for_budget``, which record how many calls came before) are plain
    methods that return a coroutine: the call's number is taken when the
    handler makes the call, on the loop, not when a database thread gets to
    it. So calls made together (``asyncio.gather``) are numbered, recorded
    and replayed in the order they were made.
    """

    def __init__(self, sync: RunContext) -> None:
        self.sync = sync

    lease = property(lambda self: self.sync.lease)
    run = property(lambda self: self.sync.run)
    payload = property(lambda self: self.sync.payload)
    payloads = property(lambda self: self.sync.payloads)
    interrupted = property(lambda self: self.sync.interrupted)
    input = property(lambda self: self.sync.input)
    attempt = property(lambda self: self.sync.attempt)
    fenced = property(lambda self: self.sync.fenced)
    cancelled = property(lambda self: self.sync.cancelled)

    @property
    def state(self) -> JSON:
        return self.sync.state

    def check(self) -> None:
        self.sync.check()

    async def heartbeat(self) -> bool:
        self.check()
        return await aio.db(self.sync.heartbeat)

    def checkpoint(self, state: JSON) -> Coroutine[Any, Any, bool]:
        """``RunContext.checkpoint``, awaited; it counts the calls made before it."""
        return self._checkpoint(state, self.sync._seq)

    async def _checkpoint(self, state: JSON, tool_seq: int) -> bool:
        self.check()
        return await aio.db(self.sync._checkpoint_at, state, tool_seq)

    async def emit(self, event_type: str, data: dict[str, JSON] | None = None) -> bool:
        self.check()
        return await aio.db(self.sync.emit, event_type, data)

    async def stream(self, text: str) -> bool:
        self.check()
        return await aio.db(self.sync.stream, text)

    timed_out = property(lambda self: self.sync.timed_out)

    def ask_user(
        self, question: JSON, state: JSON = None, timeout: float | dt.timedelta | None = None
    ) -> AskUser:
        return self.sync.ask_user(question, state, timeout)

    def spawn(
        self,
        kind: str,
        payload: JSON = None,
        *,
        priority: int | None = None,
        concurrency_key: str | None = None,
        session_id: str | None = None,
    ) -> Coroutine[Any, Any, uuid.UUID]:
        """``RunContext.spawn``, awaited; numbered when called."""
        seq, recorded = self.sync._number()
        return self._spawn(
            seq,
            recorded,
            kind,
            payload,
            priority=priority,
            concurrency_key=concurrency_key,
            session_id=session_id,
        )

    async def _spawn(
        self,
        seq: int,
        recorded: ToolInvocation | None,
        kind: str,
        payload: JSON,
        **options: int | str | None,
    ) -> uuid.UUID:
        self.check()
        return await aio.db(self.sync._spawn_numbered, seq, recorded, kind, payload, **options)

    async def children(self) -> list[Run]:
        return await aio.db(self.sync.children)

    def wait_for_children(self, state: JSON = None) -> Wait:
        return self.sync.wait_for_children(state)

    def wait_for_signal(
        self, name: str, *, timeout: float | dt.timedelta | None = None, state: JSON = None
    ) -> Wait:
        return self.sync.wait_for_signal(name, timeout=timeout, state=state)

    def sleep_until(self, when: dt.datetime, state: JSON = None) -> Wait:
        return self.sync.sleep_until(when, state)

    async def reserve(self, key: str, tokens: int) -> bool:
        self.check()
        return await aio.db(self.sync.reserve, key, tokens)

    async def settle(self, *, tokens: int, key: str | None = None) -> int | None:
        self.check()
        return await aio.db(lambda: self.sync.settle(tokens=tokens, key=key))

    def wait_for_budget(
        self, key: str, tokens: int, state: JSON = None
    ) -> Coroutine[Any, Any, BudgetWait]:
        """``RunContext.wait_for_budget``, awaited; it counts the calls made before it."""
        return self._wait_for_budget(key, tokens, state, self.sync._seq)

    async def _wait_for_budget(
        self, key: str, tokens: int, state: JSON, tool_seq: int
    ) -> BudgetWait:
        self.check()
        return await aio.db(self.sync._wait_for_budget_at, key, tokens, state, tool_seq)

    def record_usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | Decimal | None = None,
    ) -> Coroutine[Any, Any, Decimal | None]:
        """``RunContext.record_usage``, awaited; its input checked (ValueError)
        when called, and recorded even once the handler is cancelled."""
        checked = usage.checked(model, input_tokens, output_tokens, cost)
        return aio.db(self.sync._record_usage_numbered, self.sync._usage.number(), *checked)

    def idempotency_key(self, seq: int) -> str:
        return self.sync.idempotency_key(seq)

    def patched(self, name: str) -> Coroutine[Any, Any, bool]:
        """``RunContext.patched``, awaited. Numbered when called, as
        ``invoke_tool`` is (ValueError for a bad name then)."""
        self.check()
        seq, known = self.sync._patch_number(name)
        return self._patched(seq, name, known)

    async def _patched(self, seq: int, name: str, known: bool | None) -> bool:
        if known is not None:
            return known
        self.check()
        return await aio.db(self.sync._record_patch, seq, name)

    def invoke_tool(
        self,
        name: str,
        fn: Callable[..., JSON] | Callable[..., Awaitable[JSON]],
        *,
        args: dict[str, JSON] | None = None,
        idempotency: str = Idempotency.NON_IDEMPOTENT,
    ) -> Coroutine[Any, Any, ToolOutcome]:
        """``RunContext.invoke_tool``, awaited; ``fn`` may be ``async def``
        (awaited on the loop) or sync (run in a thread, the loop stays free).
        Numbered when called: calls gathered keep the order they were made in."""
        seq, recorded = self.sync._number()
        return self._invoke_tool(seq, recorded, name, fn, args, idempotency)

    async def _invoke_tool(
        self,
        seq: int,
        recorded: ToolInvocation | None,
        name: str,
        fn: Callable[..., JSON] | Callable[..., Awaitable[JSON]],
        args: dict[str, JSON] | None,
        idempotency: str,
    ) -> ToolOutcome:
        self.check()
        sync = self.sync
        with observe.tool(sync.lease, name, idempotency) as traced:
            begun = await aio.db(
                sync.tool_begin, seq, recorded, name, args, Idempotency(idempotency)
            )
            if isinstance(begun, ToolOutcome):
                outcome = begun
            else:
                call_args = begun
                key = sync.idempotency_key(seq)
                try:
                    if aio.is_async(fn):
                        value = await _acall(fn, call_args, key)
                    else:
                        value = await aio.in_thread(_call, fn, call_args, key)
                except asyncio.CancelledError:
                    await aio.db(sync.tool_interrupted, seq, idempotency)
                    raise
                except Exception as exc:  # noqa: BLE001 - a tool's failure is the handler's
                    outcome = await aio.db(sync.tool_failed, seq, exc)
                else:
                    outcome = await aio.db(sync.tool_done, seq, value)
            traced.done(outcome)
        return outcome


async def _acall(fn: Callable[..., Awaitable[JSON]], args: dict[str, JSON], key: str) -> JSON:
    if _accepts_key(fn):
        return await fn(**args, idempotency_key=key)
    return await fn(**args)


def _call(fn: Callable[..., JSON], args: dict[str, JSON], key: str) -> JSON:
    if _accepts_key(fn):
        return fn(**args, idempotency_key=key)
    return fn(**args)


def _accepts_key(fn: Callable[..., object]) -> bool:
    try:
        return "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _jsonable(value: JSON) -> JSON:
    """A tool's value as it will be replayed: JSON, with str() for the rest."""
    return json.loads(json.dumps(value, default=str))


#: The tool name of a patch decision's step (``ctx.patched``).
PATCH_TOOL = "runqueue.patched"
#: The longest patch name (it is stored in the step's arguments).
PATCH_NAME_MAX_LENGTH = 255


def patch_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a patch, or None."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name or len(name) > PATCH_NAME_MAX_LENGTH:
        return f"must be 1-{PATCH_NAME_MAX_LENGTH} characters, got {len(name)}"
    return text_problem(name)


def _is_patch(recorded: ToolInvocation, name: str) -> bool:
    """``recorded`` is the decision to take patch ``name``."""
    arguments = recorded.arguments
    return (
        recorded.tool == PATCH_TOOL
        and isinstance(arguments, dict)
        and arguments.get("name") == name
    )


#: Why a replay that does not match its record is refused.
_SAME_ORDER = "a handler must make its calls in the same order"
_SAME_ARGUMENTS = f"{_SAME_ORDER}, with the same arguments"


def _same_tool_call(recorded: ToolInvocation, name: str, args: dict[str, JSON] | None) -> None:
    """PermanentError unless ``recorded`` is this call: the same tool with
    the same arguments (as JSON: key order, tuples and 1 against 1.0 are no
    difference). Every tool record stores its arguments, so records made
    before this check was added are checked the same way."""
    seq = recorded.seq
    if recorded.tool != name:
        raise PermanentError(
            f"tool call #{seq} was {recorded.tool!r} on an earlier attempt and is "
            f"{name!r} now: {_SAME_ORDER}"
        )
    try:
        same = recorded.arguments == json.loads(json.dumps(args or {}, allow_nan=False))
    except (TypeError, ValueError):
        same = False  # not JSON: never what was recorded
    if not same:
        raise PermanentError(
            f"tool call #{seq} was {name!r} with other arguments on an earlier attempt: "
            f"{_SAME_ARGUMENTS}"
        )


def _respawned(recorded: ToolInvocation, kind: str, payload: JSON) -> uuid.UUID:
    """The child an earlier attempt's spawn made as this call; PermanentError
    if that call was not this spawn: another tool, another kind, or (when
    the record has its hash: records made before it have the kind only)
    another payload."""
    seq, arguments = recorded.seq, recorded.arguments
    if recorded.tool != leases.SPAWN_TOOL or not isinstance(recorded.result, dict):
        raise PermanentError(
            f"tool call #{seq} was {recorded.tool!r} on an earlier attempt and is a "
            f"spawn of {kind!r} now: {_SAME_ORDER}"
        )
    recorded_kind = arguments.get("kind", kind) if isinstance(arguments, dict) else kind
    if recorded_kind != kind:
        raise PermanentError(
            f"tool call #{seq} was a spawn of {recorded_kind!r} on an earlier attempt and is a "
            f"spawn of {kind!r} now: {_SAME_ORDER}"
        )
    digest = arguments.get(leases.PAYLOAD_DIGEST) if isinstance(arguments, dict) else None
    if digest is not None and digest != leases.payload_digest(payload):
        raise PermanentError(
            f"tool call #{seq} was a spawn of {kind!r} with another payload on an earlier "
            f"attempt: {_SAME_ARGUMENTS}"
        )
    return uuid.UUID(str(recorded.result["run_id"]))


def build_context(lease: leases.Lease) -> RunContext:
    """Resume from the last checkpoint, with the tool records made since,
    and what the run it interrupted had done (``ctx.interrupted``)."""
    interrupted = interrupted_of(lease.run.interrupted_id) if lease.run.interrupted_id else None
    if lease.epoch == 1 and lease.run.forked_from_id is None:
        # The first lease the run ever had (submit starts at epoch 0 and
        # every transition bumps it): checkpoints and tool records are only
        # written under a lease, so there is nothing to resume from. A
        # fork's first lease replays the steps copied from the run it was
        # forked from (runqueue.leases.forks).
        return RunContext(lease, state=None, tool_seq=0, recorded={}, interrupted=interrupted)
    last = Checkpoint.objects.filter(run_id=lease.run_id).order_by("-seq").first()
    tool_seq = last.tool_seq if last else 0
    recorded = {
        tool.seq: tool
        for tool in ToolInvocation.objects.filter(run_id=lease.run_id, seq__gte=tool_seq)
    }
    return RunContext(
        lease,
        state=last.state if last else None,
        tool_seq=tool_seq,
        recorded=recorded,
        interrupted=interrupted,
    )


@cache
def _transient_classes(paths: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(import_string(p) for p in paths)


def decide(lease: leases.Lease) -> Outcome:
    """Run the handler for a claimed lease and say how the attempt ended.

    Writes no outcome (the worker's slot group does, fenced); the handler's
    own writes (checkpoints, tool records, events) go through the fence as
    it makes them. A database error under the handler is raised: the
    connection failed, nothing can be written now, and the lease is left to
    expire so the sweeper requeues the run (the only requeue path).
    An async handler runs on the process's loop; this thread waits for it.
    """
    try:
        fn = registry.lookup(lease.run.kind, lease.run.handler_version)
    except UnknownKind as exc:
        return _unhandled(lease, exc)
    if aio.is_async(fn):
        return aio.run(_decide_async(lease, fn)).result()
    ctx = build_context(lease)
    try:
        with max_duration(lease):
            result = fn(ctx)
    except Exception as exc:  # noqa: BLE001 - classified by the failure taxonomy
        if _database_lost(exc):
            raise
        ctx.text.flush()  # what it streamed, before its outcome
        return _raised(lease, exc)
    ctx.text.flush()
    return _returned(lease, ctx, result)


async def decide_async(lease: leases.Lease) -> Outcome:
    """``decide`` for a slot on the loop: an async handler runs here, a sync
    one in a thread of its own (``aio.in_thread``)."""
    try:
        fn = registry.lookup(lease.run.kind, lease.run.handler_version)
    except UnknownKind as exc:
        return _unhandled(lease, exc)
    if not aio.is_async(fn):
        return await aio.in_thread(decide, lease)
    return await _decide_async(lease, fn)


def _unhandled(lease: leases.Lease, exc: UnknownKind) -> Outcome:
    """A claim takes only runs of the kinds and versions this process has
    (``registry.served``), so this is a registry changed since the claim:
    the run is given back, queued at once with its attempt returned, for a
    worker that has its handler. Never a dead letter."""
    logger.warning("Run id=%s: %s in this worker; giving it back", lease.run_id, exc)
    return Released("unhandled")


async def _decide_async(lease: leases.Lease, fn: Callable[..., Awaitable[JSON]]) -> Outcome:
    ctx = AsyncRunContext(await aio.db(build_context, lease))
    # The handler gets a task of its own, so a cancel that lands after it
    # returned cancels nothing else; the lease cancels it from any thread.
    task = asyncio.ensure_future(fn(ctx))
    loop = asyncio.get_running_loop()
    lease.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
    try:
        with max_duration(lease):
            result = await task
    except asyncio.CancelledError as exc:
        if not lease.cancelled.is_set():
            raise  # not the run's cancel: the loop itself is going away
        await aio.db(ctx.sync.text.flush)
        return _raised(lease, RunCancelled(lease.run_id, lease.cancel_reason), exc)
    except Exception as exc:  # noqa: BLE001 - classified by the failure taxonomy
        if _database_lost(exc):
            raise
        await aio.db(ctx.sync.text.flush)
        return _raised(lease, exc)
    await aio.db(ctx.sync.text.flush)
    return _returned(lease, ctx.sync, result)


@contextmanager
def max_duration(lease: leases.Lease) -> Iterator[None]:
    """While the handler runs: once the attempt has run the run's
    ``max_duration`` (counted from when its slot started it), its lease is
    cancelled as by the stop button, reason ``max_duration``: ``ctx.cancelled``
    set, an async handler's task cancelled; the attempt then fails for good
    (``_over_time``) and the heartbeat stops renewing its lease, so a
    handler that ignores the cancel is fenced by the lease's expiry
    (docs/decisions.md, "Run deadlines")."""
    seconds = lease.run.max_duration
    if seconds is None:
        yield
        return
    started = lease.started or time.monotonic()
    timer = threading.Timer(
        max(0.0, seconds - (time.monotonic() - started)), lease.cancel, args=(MAX_DURATION,)
    )
    timer.daemon = True
    timer.name = f"runqueue-max-duration-{lease.run_id}"
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _over_time(lease: leases.Lease) -> Outcome | None:
    """The attempt's outcome once its max_duration cancelled it: failed, for
    good (a retry would run as long again), whatever the handler did after."""
    if not (lease.cancelled.is_set() and lease.cancel_reason == MAX_DURATION):
        return None
    seconds = lease.run.max_duration
    return Failed(
        failure_record(
            None,
            classification=MAX_DURATION,
            attempt=lease.attempt,
            error_type="MaxDuration",
            message=f"the attempt ran longer than its max_duration of {seconds:g}s",
        )
    )


def _database_lost(exc: BaseException) -> bool:
    """The handler met a lost connection or a server that cannot take
    writes now (read-only, shutting down): no outcome can be written, so none
    is decided; the worker reconnects and the lease's expiry requeues the
    run. Never the run's failure."""
    return isinstance(exc, OperationalError | InterfaceError) or connection_lost(exc)


def _raised(lease: leases.Lease, exc: Exception, cause: BaseException | None = None) -> Outcome:
    """How an attempt whose handler raised ``exc`` ended."""
    if (over := _over_time(lease)) is not None:
        return over
    if lease.cancelled.is_set():
        if lease.cancel_reason == "stopping":
            return Released("shutdown")  # queued at once, the attempt handed back
        # Cancelled or lost: the outcome's write is fenced, as any would be.
        return GaveUp(exc)
    transient = _transient_classes(get_settings().TRANSIENT_EXCEPTIONS)
    if classify(exc, transient) == PERMANENT:
        logger.info("Run id=%s failed permanently: %r", lease.run_id, exc)
        return Failed(permanent_failure(exc, lease.attempt))
    return GaveUp(exc)


def _returned(
    lease: leases.Lease, ctx: RunContext, result: JSON | AskUser | Wait | BudgetWait
) -> Outcome:
    """How an attempt whose handler returned ``result`` ended."""
    if (over := _over_time(lease)) is not None:
        return over
    if isinstance(result, BudgetWait):
        return result
    try:
        if isinstance(result, AskUser):
            return Waiting.of(result.question, result.state, ctx._seq, result.timeout)
        if isinstance(result, Wait):
            json_text(result.state, "checkpoint state")
            return Suspended(
                reason=result.reason,
                wait_name=result.name,
                # Checked again: a Wait made directly skipped the ctx call.
                until=wake_time(result.until),
                timeout=positive_seconds(result.timeout),
                state=result.state,
                tool_seq=ctx._seq,
            )
        return Succeeded.of(result)
    except ValueError as exc:
        return Failed(
            failure_record(
                exc,
                classification=PERMANENT,
                attempt=lease.attempt,
                message=f"the handler's result could not be stored: {exc}",
            )
        )
