"""The support agent of tests/agents/killed_agents.py in Pydantic AI, and
its kinds."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import runqueue
from runqueue.contrib.pydantic_ai import RunqueueAgent
from tests.agents.killed_agents import (
    KINDS,
    MODEL,
    PROMPT,
    lookup_order,
    notify_customer,
    refund,
    respond,
)

SDK = "pydantic_ai"


async def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    action = await respond(returns, [t.name for t in info.function_tools])
    if isinstance(action, str):
        return ModelResponse(parts=[TextPart(action)])
    name, args = action
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{len(returns)}")])


def agent(*, approval: bool, extra: bool = False) -> RunqueueAgent:
    """The agent; ``approval``: its refund needs a person's approval;
    ``extra``: one more tool (the next deploy's)."""
    support = Agent(FunctionModel(script, model_name=MODEL), name="support")
    support.tool_plain(lookup_order)
    support.tool_plain(requires_approval=approval)(refund)
    if extra:
        support.tool_plain(notify_customer)
    return RunqueueAgent(support, idempotent={"lookup_order"})


def handler(kind: str, durable: RunqueueAgent, **version: Any) -> None:
    @runqueue.handler(kind, **version)
    async def turn(ctx: Any) -> str:
        return (await durable.run(PROMPT, ctx=ctx)).output


handler(KINDS["killed"][SDK], agent(approval=False))
handler(KINDS["approve"][SDK], agent(approval=True))
handler(KINDS["deploy"][SDK], agent(approval=True), version=1)
