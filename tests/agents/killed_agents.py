"""One support agent, written for each SDK (Pydantic AI and the OpenAI
Agents SDK), for real ``runworker`` processes: model -> lookup_order
(idempotent) -> model -> refund (non-idempotent) -> final answer.

Both SDKs' models follow one script (``respond``) and both agents run the
same tools, so the two SDKs' tests assert the same things. Everything that
happens in the worker goes to the test ledger (tests/handlers.py: a
connection of its own, so a row survives kill -9):

- ``model``: a model request was sent (detail: its step, 0, 1, 2);
- ``offered``: the tools that request offered the model (comma-separated);
- ``saw``: what the final request carried as the refund's return;
- ``tool``: a tool's side effect (detail: the tool's name);
- ``parked``: the worker stopped at a point the test asked for with a
  ``park`` row, the first time only, and waits there to be killed.

The kinds (``KINDS``): ``killed`` (the plain agent), ``approve`` (refund
needs approval, each SDK's own way) and ``deploy`` version 1 (as
``approve``; tests/agents/killed_agents_v2.py adds version 2, whose agent
has one more tool).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent as OpenAIAgent
from agents import function_tool, set_tracing_disabled
from agents.items import ModelResponse as OpenAIResponse
from agents.models.interface import Model
from agents.usage import Usage
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
from runqueue import db
from runqueue.contrib.openai_agents import Runner
from runqueue.contrib.pydantic_ai import RunqueueAgent
from tests.agents.openai_support import call, items_of, say
from tests.handlers import ledger

set_tracing_disabled(True)

#: The ledger's run_id column for every row here (one run at a time per test).
TAG = "agent"
PROMPT = "refund order 7"
MODEL = "m-support"
#: The answer of a run nobody interrupted (and of an approved refund).
ANSWER = "done: refunded 7"
SDKS = ("pydantic_ai", "openai_agents")
KINDS = {
    name: {sdk: f"agents.{name}.{sdk}" for sdk in SDKS} for name in ("killed", "approve", "deploy")
}
#: How long a parked worker waits to be killed before it gives up (a test
#: that never kills it has failed already).
PARK_SECONDS = 120


def _park_asked(point: str) -> bool:
    """True the first time ``point`` is reached after the test asked to park
    there (a ``park`` row): writes ``parked``, which the test waits for."""
    with db.connect() as conn:
        asked, parked = conn.execute(
            "SELECT count(*) FILTER (WHERE what = 'park'),"
            "       count(*) FILTER (WHERE what = 'parked')"
            "  FROM runqueue_test_ledger WHERE run_id = %s AND detail = %s",
            (TAG, point),
        ).fetchone()
        if not asked or parked:
            return False
        conn.execute(
            "INSERT INTO runqueue_test_ledger (run_id, what, detail) VALUES (%s, 'parked', %s)",
            (TAG, point),
        )
        return True


async def park(point: str) -> None:
    """Stop here for good, if the test asked to (the worker is killed here)."""
    if await asyncio.to_thread(_park_asked, point):
        await asyncio.sleep(PARK_SECONDS)
        raise RuntimeError(f"parked at {point} and never killed")


async def note(what: str, detail: str) -> None:
    await asyncio.to_thread(ledger, TAG, what, detail)


async def respond(returns: list[Any], offered: list[str]) -> tuple[str, dict] | str:
    """The script of both SDKs' models: a tool call (name, arguments) or the
    final text, from the tool returns the request carries (in order)."""
    step = len(returns)
    await note("model", str(step))
    await note("offered", ",".join(sorted(offered)))
    if step == 2:
        await note("saw", str(returns[1]))
    await park(f"model-{step}")
    if step == 0:
        return ("lookup_order", {"order": 7})
    if step == 1:
        return ("refund", {"order": 7})
    return f"done: {returns[1]}"


# --- The tools (the same functions for both SDKs) --------------------------


async def lookup_order(order: int) -> dict:
    """Look an order up."""
    await note("tool", "lookup_order")
    await park("lookup_order")
    return {"id": order, "total": 40}


async def refund(order: int) -> str:
    """Refund an order."""
    await note("tool", "refund")
    await park("refund")
    return f"refunded {order}"


async def notify_customer(order: int) -> str:
    """Tell the customer about their order (version 2 of ``deploy`` only)."""
    await note("tool", "notify_customer")
    return "notified"


# --- Pydantic AI -------------------------------------------------------------


async def pai_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
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


def pai_agent(*, approval: bool, extra: bool = False) -> RunqueueAgent:
    agent = Agent(FunctionModel(pai_script, model_name=MODEL), name="support")
    agent.tool_plain(lookup_order)
    agent.tool_plain(requires_approval=approval)(refund)
    if extra:
        agent.tool_plain(notify_customer)
    return RunqueueAgent(agent, idempotent={"lookup_order"})


def pai_handler(kind: str, durable: RunqueueAgent, **version: Any) -> None:
    @runqueue.handler(kind, **version)
    async def turn(ctx: Any) -> str:
        return (await durable.run(PROMPT, ctx=ctx)).output


# --- OpenAI Agents SDK -------------------------------------------------------


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
    ) -> OpenAIResponse:
        items = items_of(input)
        returns = [i["output"] for i in items if i.get("type") == "function_call_output"]
        action = await respond(returns, [t.name for t in tools])
        if isinstance(action, str):
            output = [say(action)]
        else:
            output = [call(*action, items)]
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return OpenAIResponse(output=output, usage=usage, response_id=f"r{len(returns)}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("these tests do not stream")


def oa_agent(*, approval: bool, extra: bool = False) -> OpenAIAgent:
    tools = [function_tool(lookup_order), function_tool(refund, needs_approval=approval)]
    if extra:
        tools.append(function_tool(notify_customer))
    return OpenAIAgent(name="support", instructions="Help.", model=ScriptModel(), tools=tools)


def oa_handler(kind: str, agent: OpenAIAgent, **version: Any) -> None:
    @runqueue.handler(kind, **version)
    def turn(ctx: runqueue.RunContext) -> str:
        result = Runner.run_sync(agent, PROMPT, ctx=ctx, idempotent={"lookup_order"})
        return result.final_output


pai_handler(KINDS["killed"]["pydantic_ai"], pai_agent(approval=False))
pai_handler(KINDS["approve"]["pydantic_ai"], pai_agent(approval=True))
pai_handler(KINDS["deploy"]["pydantic_ai"], pai_agent(approval=True), version=1)
oa_handler(KINDS["killed"]["openai_agents"], oa_agent(approval=False))
oa_handler(KINDS["approve"]["openai_agents"], oa_agent(approval=True))
oa_handler(KINDS["deploy"]["openai_agents"], oa_agent(approval=True), version=1)
