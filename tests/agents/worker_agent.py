"""A multi-step Pydantic AI agent for real ``runworker`` processes: every
model request and tool run is written to the test ledger (a connection of
its own, so it survives kill -9). The first time the second model request
is sent, it never answers: the test kills the worker there, at the step
boundary after the lookup."""

from __future__ import annotations

import asyncio
from typing import Any

from django.db import connection
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
from runqueue.runtime import aio
from tests.handlers import ledger

RUN = "worker-agent"


def _sent_before(detail: str) -> bool:
    def read() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM runqueue_test_ledger WHERE what = 'model' AND detail = %s",
                [detail],
            )
            return cursor.fetchone()[0] > 1

    return read()


async def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    seen = [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    detail = str(len(seen))
    await aio.db(ledger, RUN, "model", detail)
    if len(seen) == 1 and not await aio.db(_sent_before, detail):
        await asyncio.Event().wait()  # the first worker dies here
    if not seen:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order": 7}, tool_call_id="a")])
    if len(seen) == 1:
        return ModelResponse(parts=[ToolCallPart("refund", {"order": 7}, tool_call_id="b")])
    return ModelResponse(parts=[TextPart(f"done: {seen[1].content}")])


agent = Agent(FunctionModel(script, model_name="m-worker"), name="worker")


@agent.tool_plain
def lookup_order(order: int) -> dict:
    ledger(RUN, "tool", "lookup_order")
    return {"id": order}


@agent.tool_plain
def refund(order: int) -> str:
    ledger(RUN, "tool", "refund")
    return f"refunded {order}"


durable = RunqueueAgent(agent, idempotent={"lookup_order"})


@runqueue.handler("pai.worker")
async def worker_turn(ctx: Any) -> str:
    return (await durable.run("refund order 7", ctx=ctx)).output
