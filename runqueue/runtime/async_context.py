"""``AsyncRunContext``: what an ``async def`` handler sees, the sync
context's calls awaited."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from collections.abc import Awaitable, Callable, Coroutine
from decimal import Decimal
from typing import Any, Concatenate

from runqueue.history import usage
from runqueue.leases.outcomes import (
    BudgetWait,
    ToolOutcome,
)
from runqueue.models import (
    Idempotency,
    Run,
    ToolInvocation,
)
from runqueue.observability import observe
from runqueue.runtime import aio
from runqueue.runtime.context import RunContext
from runqueue.runtime.tools import (
    Approval,
    acall,
    approval_of,
    call,
)
from runqueue.types import JSON


def _as_sync[**P, R](
    method: Callable[Concatenate[RunContext, P], R],
) -> Callable[Concatenate[AsyncRunContext, P], R]:
    """The sync context's ``method``, called as it is: a call with nothing
    to await (it returns a ``Wait``, or a key). Its signature and
    docstring are the sync one's, so the two cannot drift apart."""

    @functools.wraps(method)
    def on_sync(ctx: AsyncRunContext, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(ctx.sync, *args, **kwargs)

    return on_sync


def _numbered[**P, R](
    method: Callable[Concatenate[RunContext, P], R],
) -> Callable[Concatenate[AsyncRunContext, P], Coroutine[Any, Any, R]]:
    """The sync context's ``method`` for a recorded step, awaited: numbered
    when the handler makes the call (on the loop), run as that call on a
    database thread. Its signature and docstring are the sync one's."""

    @functools.wraps(method)
    def on_loop(
        ctx: AsyncRunContext, /, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, R]:
        return aio.db(ctx.sync._as_numbered, ctx.sync._number(), method, *args, **kwargs)

    return on_loop


class AsyncRunContext:
    """What an ``async def`` handler sees: ``RunContext``'s calls, awaited.

    Each write runs the sync context's own fenced code on a database thread
    (``runqueue.runtime.aio.db``), so its semantics are the same by construction;
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

    ask_user = _as_sync(RunContext.ask_user)

    spawn = _numbered(RunContext.spawn)
    schedule = _numbered(RunContext.schedule)

    async def steers(self) -> list[JSON]:
        """``RunContext.steers``, awaited. Await it alone, never gathered
        with other calls: whether it takes a step is known only once it has
        looked."""
        return await aio.db(self.sync.steers)

    async def children(self) -> list[Run]:
        return await aio.db(self.sync.children)

    wait_for_children = _as_sync(RunContext.wait_for_children)
    wait_for_signal = _as_sync(RunContext.wait_for_signal)
    wait_for_event = _as_sync(RunContext.wait_for_event)
    sleep_until = _as_sync(RunContext.sleep_until)

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

    idempotency_key = _as_sync(RunContext.idempotency_key)

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
        rerun_failed: bool = False,
        approval: bool | Callable[[dict[str, JSON]], object] | None = None,
        approval_timeout: float | dt.timedelta | None = None,
        on_timeout: str = "reject",
    ) -> Coroutine[Any, Any, ToolOutcome]:
        """``RunContext.invoke_tool``, awaited; ``fn`` may be ``async def``
        (awaited on the loop) or sync (run in a thread, the loop stays free).
        Numbered when called: calls gathered keep the order they were made in."""
        asked = approval_of(approval, approval_timeout, on_timeout)
        seq, recorded = self.sync._number()
        return self._invoke_tool(seq, recorded, name, fn, args, idempotency, rerun_failed, asked)

    async def _invoke_tool(
        self,
        seq: int,
        recorded: ToolInvocation | None,
        name: str,
        fn: Callable[..., JSON] | Callable[..., Awaitable[JSON]],
        args: dict[str, JSON] | None,
        idempotency: str,
        rerun_failed: bool = False,
        asked: Approval | None = None,
    ) -> ToolOutcome:
        self.check()
        sync = self.sync
        with observe.tool(sync.lease, name, idempotency) as traced:
            begun = await aio.db(
                sync.tool_begin,
                seq,
                recorded,
                name,
                args,
                Idempotency(idempotency),
                rerun_failed,
                asked,
            )
            if isinstance(begun, ToolOutcome):
                outcome = begun
            else:
                call_args = begun
                key = sync.idempotency_key(seq)
                try:
                    if aio.is_async(fn):
                        value = await acall(fn, call_args, key)
                    else:
                        value = await aio.in_thread(call, fn, call_args, key)
                except asyncio.CancelledError:
                    await aio.db(sync.tool_interrupted, seq, idempotency)
                    raise
                except Exception as exc:  # noqa: BLE001 - a tool's failure is the handler's
                    outcome = await aio.db(sync.tool_failed, seq, exc)
                else:
                    outcome = await aio.db(sync.tool_done, seq, value)
            traced.done(outcome)
        return outcome
