"""``Runner``: ``agents.Runner``'s ``run``, ``run_sync`` and
``run_streamed`` for a handler, the agent run as steps of the handler's
run: the seams installed, the durable run made active, the run's session
as the conversation and its ``RunConfig`` made replayable."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

import agents
from agents import RunConfig, RunResult, RunResultStreaming
from agents.items import TResponseInputItem
from agents.run_config import ToolExecutionConfig

from runqueue.contrib import on_loop, steps
from runqueue.contrib.openai_agents.durable import Durable, active
from runqueue.contrib.openai_agents.seams import install
from runqueue.contrib.openai_agents.sessions import default_session
from runqueue.contrib.openai_agents.steering import with_steers
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.types import JSON


class Runner:
    """``agents.Runner`` for a runqueue handler: the same arguments, plus
    ``ctx`` (the handler's context), ``idempotent`` (names of the tools safe
    to run again after a crash; the rest are non-idempotent), ``session``
    (default: the run's ``session_id`` as the conversation, a
    ``RunqueueSession``; None for none) and ``steer`` (how a message sent
    to steer the turn, ``on_busy="steer"``, reads as the user's words, given
    to the agent before its next model request; ``steps.steer_text`` by
    default, None to leave such messages for the session's next turn)."""

    @classmethod
    async def run(
        cls,
        starting_agent: agents.Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        *,
        ctx: RunContext | AsyncRunContext,
        idempotent: Collection[str] = (),
        session: Any = "run",
        run_config: RunConfig | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        **kwargs: Any,
    ) -> RunResult:
        """Run the agent as steps of the run (an async handler, or any code on
        runqueue's loop)."""
        durable = _begin(ctx, idempotent, stream=False, steer=steer, kwargs=kwargs)
        with active(durable):
            return await agents.Runner.run(
                starting_agent,
                input,
                session=default_session(durable.ctx, session),
                run_config=_config(run_config, durable),
                **kwargs,
            )

    @classmethod
    def run_sync(
        cls,
        starting_agent: agents.Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        *,
        ctx: RunContext,
        stream: bool = False,
        **kwargs: Any,
    ) -> RunResult | RunResultStreaming:
        """``run`` from a sync handler: the agent runs on runqueue's loop while
        the handler's thread waits (and cancels it if the run is cancelled).
        ``stream=True`` sends the text deltas to ``ctx.stream``."""
        if isinstance(ctx, AsyncRunContext):
            raise TypeError("run_sync is for a sync handler's RunContext; await Runner.run")
        if stream:
            drained = _drained(starting_agent, input, ctx, kwargs)
            return on_loop.wait_for(ctx, drained, instead="Runner.run")
        return on_loop.wait_for(
            ctx, cls.run(starting_agent, input, ctx=ctx, **kwargs), instead="Runner.run"
        )

    @classmethod
    def run_streamed(
        cls,
        starting_agent: agents.Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        *,
        ctx: RunContext | AsyncRunContext,
        idempotent: Collection[str] = (),
        session: Any = "run",
        run_config: RunConfig | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        **kwargs: Any,
    ) -> RunResultStreaming:
        """``agents.Runner.run_streamed`` as steps of the run: the text deltas
        of the outermost agent's responses go to ``ctx.stream`` as they
        arrive, the final response to the step's record. Iterate
        ``stream_events()`` (on runqueue's loop) to drive it."""
        durable = _begin(ctx, idempotent, stream=True, steer=steer, kwargs=kwargs)
        with active(durable):  # the SDK's task copies the context here
            return agents.Runner.run_streamed(
                starting_agent,
                input,
                session=default_session(durable.ctx, session),
                run_config=_config(run_config, durable),
                **kwargs,
            )


async def _drained(
    agent: agents.Agent[Any], agent_input: Any, ctx: RunContext, kwargs: dict[str, Any]
) -> RunResultStreaming:
    result = Runner.run_streamed(agent, agent_input, ctx=ctx, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def _begin(
    ctx: RunContext | AsyncRunContext,
    idempotent: Collection[str],
    stream: bool,
    steer: Callable[[JSON], str] | None,
    kwargs: dict[str, Any],
) -> Durable:
    install()
    if isinstance(idempotent, str):
        raise TypeError("idempotent takes a collection of tool names, not one string")
    server_managed = any(
        kwargs.get(name)
        for name in ("previous_response_id", "conversation_id", "auto_previous_response_id")
    )
    return Durable(
        ctx=on_loop.as_async(ctx),
        idempotent=frozenset(idempotent),
        stream=stream,
        steer=steer,
        server_managed=server_managed,
    )


def _config(given: RunConfig | dict[str, Any] | None, durable: Durable) -> RunConfig:
    """The caller's RunConfig with function tools run one at a time, in the
    order the model asked for them: each call's step number then follows
    from the model's response alone, so a replay numbers them the same
    (calls run together would be numbered in the order they happen to start,
    and an agent used as a tool interleave its steps with its siblings');
    and, when the run reads steers, its ``call_model_input_filter`` (the
    SDK's hook right before each model call) with the steers put in first
    (``steering.with_steers``)."""
    run_config: RunConfig
    if given is None:
        run_config = RunConfig()
    elif isinstance(given, dict):
        run_config = RunConfig(**given)
    else:
        run_config = given
    execution = run_config.tool_execution or ToolExecutionConfig()
    run_config = dataclasses.replace(
        run_config,
        tool_execution=dataclasses.replace(execution, max_function_tool_concurrency=1),
    )
    return with_steers(run_config, durable)
