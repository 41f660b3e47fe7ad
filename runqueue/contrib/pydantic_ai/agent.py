"""``RunqueueAgent``: the wrapper a handler runs an unchanged
``pydantic_ai.Agent`` through, its durability capability attached to each
run (``runqueue.contrib.pydantic_ai.durability``), from an ``async def``
handler or, waiting on runqueue's loop, a sync one; with ``stream``, the
model's text deltas go to the run's live stream."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from typing import Any

from pydantic_ai import Agent, messages
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.tools import RunContext as AgentRunContext

from runqueue.contrib import on_loop, steps
from runqueue.contrib.pydantic_ai.durability import RunqueueDurability, current
from runqueue.contrib.pydantic_ai.mcp import send_idempotency_keys
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.types import JSON


class RunqueueAgent:
    """An unchanged ``pydantic_ai.Agent``, run as recorded steps of a runqueue
    handler's run. Build it once, at import time, beside the agent.

    ``idempotent``: names of tools that are safe to run again after a crash
    (the rest are non-idempotent: one cut short ends ``uncertain``).
    ``approval``: tool name to ``True`` or a function of the call's
    arguments, for tools a person approves first (``ctx.invoke_tool``'s
    ``approval``). Both can also be declared on a tool
    (``metadata=tool_metadata(...)``). ``steer``: how a message sent to
    steer the turn (``on_busy="steer"``) reads as the user's words, which
    the agent is given before its next model request
    (``steps.steer_text`` by default); None to leave such messages for the
    session's next turn.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        idempotent: Iterable[str] = (),
        approval: Mapping[str, bool | Callable[[dict[str, JSON]], bool]] | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        name: str | None = None,
    ) -> None:
        self.agent = agent
        self.idempotent = frozenset(idempotent)
        self.approval = dict(approval or {})
        self.steer = steer
        self.name = name or agent.name or "agent"
        for toolset in agent.toolsets:
            toolset.apply(send_idempotency_keys)

    def _capability(self, stream: bool) -> RunqueueDurability:
        return RunqueueDurability(
            idempotent=self.idempotent,
            approval=self.approval,
            steer=self.steer,
            event_stream_handler=_stream_text if stream else None,
            name=self.name,
        )

    async def run(
        self,
        user_prompt: Any = None,
        *,
        ctx: RunContext | AsyncRunContext,
        stream: bool = False,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """``agent.run(...)`` inside an ``async def`` handler, every model
        request and tool call a step of ``ctx``'s run. ``stream``: the
        model's text deltas go to ``ctx.stream`` as they arrive (only the
        final responses are recorded)."""
        actx = on_loop.as_async(ctx)
        capabilities = [*(kwargs.pop("capabilities", None) or ()), self._capability(stream)]
        token = current.set(actx)
        try:
            return await self.agent.run(user_prompt, capabilities=capabilities, **kwargs)
        finally:
            current.reset(token)

    def run_sync(
        self,
        user_prompt: Any = None,
        *,
        ctx: RunContext,
        stream: bool = False,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """``run`` from a sync handler: the agent runs on runqueue's loop
        (``runqueue.runtime.aio``) while this thread waits; a cancelled run cancels it."""
        return on_loop.wait_for(
            ctx,
            self.run(user_prompt, ctx=ctx, stream=stream, **kwargs),
            instead="RunqueueAgent.run",
        )


async def _stream_text(
    run_ctx: AgentRunContext[Any], events: AsyncIterable[messages.AgentStreamEvent]
) -> None:
    """The model's text deltas to the run's live stream, as they arrive."""
    ctx = current.get()
    async for event in events:
        text = ""
        if isinstance(event, messages.PartStartEvent):
            part = event.part  # a part can start with text
            text = part.content if isinstance(part, messages.TextPart) else ""
        elif isinstance(event, messages.PartDeltaEvent) and isinstance(
            event.delta, messages.TextPartDelta
        ):
            text = event.delta.content_delta
        if ctx is not None and text:
            await ctx.stream(text)
