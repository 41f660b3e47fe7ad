"""The support agent of tests/agents/killed_agents.py in the OpenAI Agents
SDK, and its kinds."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage

import runqueue
from runqueue.contrib.openai_agents import Runner
from tests.agents.killed_agents import (
    KINDS,
    MODEL,
    PROMPT,
    lookup_order,
    notify_customer,
    refund,
    respond,
)
from tests.agents.openai_support import call, items_of, say

SDK = "openai_agents"
set_tracing_disabled(True)


class ScriptModel(Model):
    """The SDK's Model interface over ``respond``."""

    model = MODEL  # the name its steps are recorded under

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = items_of(input)
        returns = [i["output"] for i in items if i.get("type") == "function_call_output"]
        action = await respond(returns, [t.name for t in tools])
        if isinstance(action, str):
            output = [say(action)]
        else:
            output = [call(*action, items)]
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(output=output, usage=usage, response_id=f"r{len(returns)}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("these tests do not stream")


def agent(*, approval: bool, extra: bool = False) -> Agent:
    """The agent; ``approval``: its refund needs a person's approval;
    ``extra``: one more tool (the next deploy's)."""
    tools = [function_tool(lookup_order), function_tool(refund, needs_approval=approval)]
    if extra:
        tools.append(function_tool(notify_customer))
    return Agent(name="support", instructions="Help.", model=ScriptModel(), tools=tools)


def handler(kind: str, agent: Agent, **version: Any) -> None:
    @runqueue.handler(kind, **version)
    def turn(ctx: runqueue.RunContext) -> str:
        result = Runner.run_sync(agent, PROMPT, ctx=ctx, idempotent={"lookup_order"})
        return result.final_output


handler(KINDS["killed"][SDK], agent(approval=False))
handler(KINDS["approve"][SDK], agent(approval=True))
handler(KINDS["deploy"][SDK], agent(approval=True), version=1)
