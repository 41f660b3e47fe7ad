"""The agents and handlers the Pydantic AI adapter's tests run: a scripted
model (pydantic-ai's ``FunctionModel``) that looks an order up, refunds it
and answers, with every model request and tool run counted."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pydantic_ai = pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

import runqueue  # noqa: E402
from runqueue.contrib.pydantic_ai import RunqueueAgent  # noqa: E402

MODEL = "m-agent"
#: The session the steering tests' turns run in.
SESSION = "pai-chat"
#: Each model request the scripted model answered: how many tool results it had seen.
MODEL_CALLS: list[int] = []
#: Each tool run: (tool, argument).
TOOL_CALLS: list[tuple[str, int]] = []
#: Each model request's user prompts, in the order the request holds them.
PROMPTS: list[list[str]] = []
#: Tool name to messages a tool submits to steer its run's session (each
#: ``on_busy="steer"``) as it runs: a person writing while the agent works.
STEER_IN: dict[str, list[str]] = {}
#: Tools that die (a BaseException standing in for the worker's death) right
#: after their side effect, before it is recorded.
DIE_IN: set[str] = set()


class Died(BaseException):  # noqa: N818 - not an error: a process death
    """The worker died."""


def _effect(tool: str, order: int) -> None:
    TOOL_CALLS.append((tool, order))
    for text in STEER_IN.pop(tool, []):
        steer(text)
    if tool in DIE_IN:
        DIE_IN.discard(tool)
        raise Died


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def _step(messages: list[ModelMessage]) -> tuple[str, Any]:
    """What the scripted model does next: ("call", (tool, args)) or ("say", text)."""
    seen = _returns(messages)
    if len(seen) == 0:
        return "call", ("lookup_order", {"order": 7})
    if len(seen) == 1:
        return "call", ("refund", {"order": seen[0].content["id"]})
    return "say", f"refund of order 7: {seen[1].content}"


def steer(text: str) -> None:
    """Send ``text`` to steer the session's running turn (from a tool's thread)."""
    from django.db import connection

    try:
        sent = runqueue.submit(
            kind="pai.steered", session_id=SESSION, payload={"text": text}, on_busy="steer"
        )
        assert sent.outcome == "steered", sent.outcome
    finally:
        connection.close()  # the thread's own connection, not left open


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    MODEL_CALLS.append(len(_returns(messages)))
    PROMPTS.append(prompts(messages))
    what, detail = _step(messages)
    usage = RequestUsage(input_tokens=100 * (1 + MODEL_CALLS[-1]), output_tokens=10)
    if what == "call":
        tool, args = detail
        part: Any = ToolCallPart(tool, args, tool_call_id=f"call-{tool}")
    else:
        part = TextPart(detail)
    return ModelResponse(parts=[part], usage=usage, model_name=MODEL)


async def script_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    MODEL_CALLS.append(len(_returns(messages)))
    what, detail = _step(messages)
    if what == "call":
        tool, args = detail
        arguments = json.dumps(args)
        yield {0: DeltaToolCall(name=tool, json_args=arguments, tool_call_id=f"call-{tool}")}
        return
    for word in detail.split(" "):
        yield word + " "


model = FunctionModel(script, stream_function=script_stream, model_name=MODEL)
agent = Agent(model, name="support")


@agent.tool_plain
def lookup_order(order: int) -> dict:
    """Look an order up."""
    _effect("lookup_order", order)
    return {"id": order, "total": 40}


@agent.tool_plain
def refund(order: int) -> str:
    """Refund an order: a write."""
    _effect("refund", order)
    return f"refunded {order}"


durable = RunqueueAgent(agent, idempotent={"lookup_order"})


@runqueue.handler("pai.sync")
def sync_turn(ctx: runqueue.RunContext) -> str:
    return durable.run_sync(ctx.payload["prompt"], ctx=ctx).output


@runqueue.handler("pai.async")
async def async_turn(ctx: Any) -> str:
    result = await durable.run(ctx.payload["prompt"], ctx=ctx)
    return result.output


@runqueue.handler("pai.steered")
async def steered_turn(ctx: Any) -> str:
    result = await durable.run(ctx.payload["text"], ctx=ctx)
    return result.output


@runqueue.handler("pai.stream")
async def stream_turn(ctx: Any) -> str:
    result = await durable.run(ctx.payload["prompt"], ctx=ctx, stream=True)
    return result.output


def reset() -> None:
    MODEL_CALLS.clear()
    TOOL_CALLS.clear()
    DIE_IN.clear()
    PROMPTS.clear()
    STEER_IN.clear()
