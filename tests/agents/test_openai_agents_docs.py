"""docs/agents.md's OpenAI Agents SDK blocks, run as written, but for the
agent's model: the block names "gpt-4.1"; the test puts a scripted model
in its place (no network), then drives the runs as a worker would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import set_tracing_disabled  # noqa: E402

import runqueue  # noqa: E402
from runqueue import events, registry, testing  # noqa: E402
from runqueue.models import EventLog, Run, ToolInvocation, Usage  # noqa: E402
from runqueue.runtime import aio
from tests.agents.openai_support import ScriptedModel, call, calls, outputs, say  # noqa: E402
from tests.database.docs.docs_blocks import named  # noqa: E402
from tests.helpers import claimed  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)
set_tracing_disabled(True)


def policy(items: list[dict[str, Any]]) -> list[Any]:
    made = calls(items)
    if "lookup_order" not in made:
        return [call("lookup_order", {"order_id": 7}, items)]
    if "refund" not in made:
        return [call("refund", {"order_id": 7}, items)]
    return [say(f"Done: {outputs(items)['refund']}")]


@pytest.fixture
def blocks() -> Iterator[dict[str, Any]]:
    """The blocks' namespace; the registry as it was afterwards."""
    saved = {kind: dict(versions) for kind, versions in registry._handlers.items()}
    try:
        yield {}
    finally:
        registry._handlers.clear()
        registry._handlers.update(saved)
        registry._served = None
        aio.close_connections()


def _run(block: str, namespace: dict[str, Any]) -> None:
    code = named(block).code
    exec(compile(code, "docs/agents.md", "exec"), namespace)  # noqa: S102 - our own docs


def test_the_converted_agent_runs_waits_for_its_approval_and_finishes(blocks) -> None:
    _run("openai-agents-example", blocks)
    model = ScriptedModel(policy)
    blocks["agent"].model = model  # the one change: no network in tests
    run = blocks["run"].run
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"  # the refund needs a person
    asked = ToolInvocation.objects.get(run_id=run.id, tool="refund")
    assert asked.status == "awaiting_approval"
    runqueue.decide_tool(run.id, asked.seq, "approve", actor="user:ana")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=run.id).result == {"answer": "Done: refunded order 7"}
    steps = ToolInvocation.objects.filter(run_id=run.id).order_by("seq")
    assert [
        (s.tool, s.status, s.idempotency) for s in steps if s.tool != "openai_agents.session"
    ] == [
        ("model:scripted-1", "completed", "idempotent"),
        ("lookup_order", "completed", "idempotent"),
        ("model:scripted-1", "completed", "idempotent"),
        ("refund", "completed", "non_idempotent"),
        ("model:scripted-1", "completed", "idempotent"),
    ]
    assert len(model.sent) == 3 and len(set(model.sent)) == 3
    assert Usage.objects.filter(run_id=run.id).count() == 3

    _run("openai-agents-stream", blocks)
    streamed = runqueue.submit(kind="support.stream", payload={"text": "Refund order 8"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"
    asked = ToolInvocation.objects.get(run_id=streamed.id, tool="refund")
    runqueue.decide_tool(streamed.id, asked.seq, "approve", actor="user:ana")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    answer = Run.objects.get(id=streamed.id).result["answer"]
    assert answer == "Done: refunded order 7"
    chunks = EventLog.objects.filter(run_id=streamed.id, type=events.TEXT).order_by("id")
    assert "".join(d["text"] for d in chunks.values_list("data", flat=True)) == answer
