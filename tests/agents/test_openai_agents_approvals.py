"""The SDK's ``needs_approval`` as runqueue's approvals: a tool that needs a
person ends the turn (ApprovalPending through the SDK untouched, no slot
held); the decision resumes the run, everything before it replays, and the
model reads what the decision says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, function_tool, set_tracing_disabled  # noqa: E402

import runqueue  # noqa: E402
from runqueue import testing  # noqa: E402
from runqueue.models import Run, ToolInvocation  # noqa: E402
from runqueue.runtime import aio
from tests.agents.openai_support import ScriptedModel, call, calls, outputs, say  # noqa: E402
from tests.helpers import claimed  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)
set_tracing_disabled(True)

RAN: list[tuple[str, Any]] = []


def _large(context: Any, params: dict[str, Any], call_id: str) -> bool:
    return params["amount"] > 100


def _refund(order_id: int, amount: int) -> str:
    """Refund part of an order."""
    RAN.append(("refund", {"order_id": order_id, "amount": amount}))
    return f"refunded {amount} on {order_id}"


refund_always = function_tool(_refund, name_override="refund", needs_approval=True)
refund_if_large = function_tool(_refund, name_override="refund", needs_approval=_large)


@function_tool
def lookup_order(order_id: int) -> dict:
    """Look an order up."""
    RAN.append(("lookup_order", order_id))
    return {"id": order_id, "total": 400}


def policy(items: list[dict[str, Any]]) -> list[Any]:
    made = calls(items)
    if "lookup_order" not in made:
        return [call("lookup_order", {"order_id": 7}, items)]
    if "refund" not in made:
        amount = 400 if "all" in items[0]["content"] else 40
        return [call("refund", {"order_id": 7, "amount": amount}, items)]
    return [say(f"Refund: {outputs(items)['refund']}")]


MODEL = ScriptedModel(policy)


@runqueue.handler("oa.approve")
def approve_turn(ctx: runqueue.RunContext) -> dict:
    tool = refund_if_large if ctx.payload.get("large_only") else refund_always
    agent = Agent(name="support", instructions="Help.", model=MODEL, tools=[lookup_order, tool])
    from runqueue.contrib.openai_agents import Runner

    result = Runner.run_sync(agent, ctx.payload["text"], ctx=ctx)
    return {"answer": result.final_output}


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    RAN.clear()
    RESEARCHER.sent.clear()
    MODEL.sent.clear()
    MODEL.requests.clear()
    yield
    aio.close_connections()


def _asked(text: str = "refund some", **payload: Any) -> Run:
    run = runqueue.submit(kind="oa.approve", payload={"text": text, **payload}).run
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"
    return Run.objects.get(id=run.id)


def test_a_tool_that_needs_approval_ends_the_turn_and_runs_once_approved() -> None:
    run = _asked()
    assert run.status == "waiting"
    record = ToolInvocation.objects.get(run_id=run.id, tool="refund")
    assert (record.seq, record.status) == (3, "awaiting_approval")
    assert record.arguments == {"order_id": 7, "amount": 40}
    assert RAN == [("lookup_order", 7)]  # the refund has not run

    runqueue.decide_tool(run.id, 3, "approve", actor="user:ana")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=run.id).result == {"answer": "Refund: refunded 40 on 7"}
    assert RAN == [("lookup_order", 7), ("refund", {"order_id": 7, "amount": 40})]
    assert len(MODEL.sent) == 3 and len(set(MODEL.sent)) == 3  # nothing sent twice
    assert ToolInvocation.objects.get(run_id=run.id, seq=3).status == "completed"


def test_edit_runs_the_tool_with_the_edited_arguments() -> None:
    run = _asked()
    runqueue.decide_tool(
        run.id, 3, "edit", actor="user:ana", arguments={"order_id": 7, "amount": 30}
    )
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert RAN[-1] == ("refund", {"order_id": 7, "amount": 30})
    assert Run.objects.get(id=run.id).result == {"answer": "Refund: refunded 30 on 7"}


def test_reject_tells_the_model_the_reason_and_never_runs_the_tool() -> None:
    run = _asked()
    runqueue.decide_tool(run.id, 3, "reject", actor="user:ana", reason="the order shipped")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert RAN == [("lookup_order", 7)]
    told = outputs(MODEL.requests[-1])["refund"]
    assert "the order shipped" in told
    assert ToolInvocation.objects.get(run_id=run.id, seq=3).status == "rejected"
    assert "the order shipped" in Run.objects.get(id=run.id).result["answer"]


def test_respond_stands_for_the_tool() -> None:
    run = _asked()
    runqueue.decide_tool(run.id, 3, "respond", actor="user:ana", result="refunded by hand")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert RAN == [("lookup_order", 7)]
    assert Run.objects.get(id=run.id).result == {"answer": "Refund: refunded by hand"}


def test_a_callable_needs_approval_asks_only_for_the_calls_it_names() -> None:
    small = runqueue.submit(
        kind="oa.approve", payload={"text": "refund some", "large_only": True}
    ).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=small.id).result == {"answer": "Refund: refunded 40 on 7"}
    large = _asked("refund all", large_only=True)
    record = ToolInvocation.objects.get(run_id=large.id, tool="refund")
    assert (record.status, record.arguments["amount"]) == ("awaiting_approval", 400)


def researcher_policy(items: list[dict[str, Any]]) -> list[Any]:
    if "lookup_order" not in calls(items):
        return [call("lookup_order", {"order_id": 3}, items)]
    return [say(f"total {outputs(items)['lookup_order']}")]


def manager_policy(items: list[dict[str, Any]]) -> list[Any]:
    if "research" not in calls(items):
        return [call("research", {"input": "order 3"}, items)]
    return [say(f"Manager: {outputs(items)['research']}")]


RESEARCHER = ScriptedModel(researcher_policy, name="researcher-1")
MANAGER = ScriptedModel(manager_policy, name="manager-1")
researcher = Agent(name="researcher", instructions="Find.", model=RESEARCHER, tools=[lookup_order])
manager = Agent(
    name="manager",
    instructions="Delegate.",
    model=MANAGER,
    tools=[researcher.as_tool(tool_name="research", tool_description="Ask.", needs_approval=True)],
)


@runqueue.handler("oa.approve_agent_tool")
def approve_agent_tool_turn(ctx: runqueue.RunContext) -> dict:
    from runqueue.contrib.openai_agents import Runner

    return {"answer": Runner.run_sync(manager, "order 3?", ctx=ctx).final_output}


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_an_agent_used_as_a_tool_waits_for_its_approval_before_it_runs(decision: str) -> None:
    run = runqueue.submit(kind="oa.approve_agent_tool").run
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"
    gate = ToolInvocation.objects.get(run_id=run.id, seq=1)
    assert (gate.tool, gate.status, gate.arguments) == (
        "research",
        "awaiting_approval",
        {"input": "order 3"},
    )
    assert RESEARCHER.sent == []  # the inner agent has not run
    runqueue.decide_tool(run.id, 1, decision, actor="user:ana", reason="not now")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    answer = Run.objects.get(id=run.id).result["answer"]
    if decision == "approve":
        assert answer == "Manager: total {'id': 3, 'total': 400}"
        assert RAN == [("lookup_order", 3)]
    else:
        assert "not now" in answer
        assert RAN == []
