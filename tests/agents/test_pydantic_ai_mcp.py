"""An MCP toolset under runqueue.contrib.pydantic_ai, against a real local
MCP server over stdio in a subprocess: annotations decide idempotency,
each call carries its idempotency key in ``_meta``, and a retry replays
finished calls instead of calling the server again."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("fastmcp")

from fastmcp.client.transports import StdioTransport  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.mcp import MCPToolset  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

import runqueue  # noqa: E402
from runqueue import leases, testing  # noqa: E402
from runqueue.contrib.pydantic_ai import MCP_META_KEY, RunqueueAgent  # noqa: E402
from runqueue.models import Run, ToolInvocation  # noqa: E402
from runqueue.runtime import aio
from tests.helpers import (
    claimed,  # noqa: E402
    expire_lease,  # noqa: E402
)

pytestmark = pytest.mark.django_db(transaction=True)

SERVER = Path(__file__).with_name("mcp_orders.py")
LOG: list[Path] = []


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    seen = [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    if not seen:
        return ModelResponse(parts=[ToolCallPart("find_order", {"order": 7}, tool_call_id="c1")])
    if len(seen) == 1:
        return ModelResponse(parts=[ToolCallPart("cancel_order", {"order": 7}, tool_call_id="c2")])
    return ModelResponse(parts=[TextPart(f"done: {seen[1].content}")])


class _Transport(StdioTransport):
    """The server script, with the log file of the test running now."""

    def __init__(self) -> None:
        super().__init__(command=sys.executable, args=[str(SERVER), "-"], keep_alive=False)

    async def connect(self, **kwargs: Any) -> Any:
        self.args = [str(SERVER), str(LOG[-1])]
        return await super().connect(**kwargs)


orders = MCPToolset(_Transport(), id="orders")
agent = Agent(FunctionModel(script, model_name="m-mcp"), name="mcp", toolsets=[orders])
durable = RunqueueAgent(agent)


@runqueue.handler("pai.mcp")
async def mcp_turn(ctx: Any) -> str:
    return (await durable.run("cancel order 7", ctx=ctx)).output


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    pass


@pytest.fixture(autouse=True)
def _log(tmp_path: Path, settings) -> Iterator[None]:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
    LOG.append(tmp_path / "calls.jsonl")
    yield
    aio.close_connections()


def _calls() -> list[dict[str, Any]]:
    if not LOG[-1].exists():
        return []
    return [json.loads(line) for line in LOG[-1].read_text().splitlines()]


def test_annotations_decide_idempotency_and_each_call_sends_its_key() -> None:
    run = runqueue.submit(kind="pai.mcp").run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=run.id).result == "done: cancelled 7"
    records = ToolInvocation.objects.filter(run_id=run.id).order_by("seq")
    assert [(r.seq, r.tool, r.idempotency, r.status) for r in records] == [
        (0, "model:m-mcp", "idempotent", "completed"),
        (1, "find_order", "idempotent", "completed"),  # readOnlyHint
        (2, "model:m-mcp", "idempotent", "completed"),
        (3, "cancel_order", "non_idempotent", "completed"),  # no hint
        (4, "model:m-mcp", "idempotent", "completed"),
    ]
    calls = _calls()
    assert [(c["tool"], c["meta"].get(MCP_META_KEY)) for c in calls] == [
        ("find_order", f"{run.id}:1"),
        ("cancel_order", f"{run.id}:3"),
    ]


def test_a_retry_replays_finished_calls_without_calling_the_server(monkeypatch) -> None:
    run = runqueue.submit(kind="pai.mcp").run
    real = leases.record_tool_outcome
    written = [0]

    def record(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        written[0] += 1
        if written[0] == 4:  # the write's outcome recorded, then the worker dies
            raise _Crash
        return done

    with monkeypatch.context() as patch:
        patch.setattr(leases, "record_tool_outcome", record)
        with pytest.raises(BaseException):  # noqa: B017, PT011 - a crash, maybe grouped
            testing.execute(claimed(lease_seconds=30))
    assert ToolInvocation.objects.filter(run_id=run.id, status="completed").count() == 4
    assert [c["tool"] for c in _calls()] == ["find_order", "cancel_order"]
    expire_lease(run.id)
    leases.sweep()
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=run.id).result == "done: cancelled 7"
    assert [c["tool"] for c in _calls()] == ["find_order", "cancel_order"]  # not again
