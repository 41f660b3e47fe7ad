"""Approvals under runqueue.contrib.pydantic_ai: a ``requires_approval``
tool (or one the wrapper names) is runqueue's ``invoke_tool(approval=True)``:
the turn ends awaiting a person, ``ApprovalPending`` passing through the
agent untouched; after ``runqueue.decide_tool`` the handler runs again,
everything before replays, and the decision reaches the model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
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
from runqueue import testing  # noqa: E402
from runqueue.contrib.pydantic_ai import RunqueueAgent  # noqa: E402
from runqueue.models import Run, ToolInvocation  # noqa: E402
from runqueue.runtime import aio
from tests.helpers import claimed  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

MODEL_CALLS: list[int] = []
REFUNDS: list[tuple[int, int]] = []


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    seen = [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    MODEL_CALLS.append(len(seen))
    if not seen:
        return ModelResponse(parts=[ToolCallPart("lookup", {"order": 7}, tool_call_id="c1")])
    if len(seen) == 1:
        args = {"order": 7, "amount": 400}
        return ModelResponse(parts=[ToolCallPart("refund", args, tool_call_id="c2")])
    return ModelResponse(parts=[TextPart(f"refund: {seen[1].content}")])


agent = Agent(FunctionModel(script, model_name="m-approve"), name="approvals")


@agent.tool_plain
def lookup(order: int) -> dict:
    return {"id": order}


@agent.tool_plain(requires_approval=True)
def refund(order: int, amount: int) -> str:
    REFUNDS.append((order, amount))
    return f"refunded {amount}"


durable = RunqueueAgent(agent, idempotent={"lookup"})


@runqueue.handler("pai.approve.sync")
def approve_sync(ctx: runqueue.RunContext) -> str:
    return durable.run_sync("refund order 7", ctx=ctx).output


@runqueue.handler("pai.approve.async")
async def approve_async(ctx: Any) -> str:
    return (await durable.run("refund order 7", ctx=ctx)).output


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    MODEL_CALLS.clear()
    REFUNDS.clear()
    yield
    aio.close_connections()


def _asked(kind: str) -> Run:
    run = runqueue.submit(kind=kind).run
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"
    record = ToolInvocation.objects.get(run_id=run.id, seq=3)
    assert (record.tool, record.status) == ("refund", "awaiting_approval")
    assert record.arguments == {"order": 7, "amount": 400}
    assert REFUNDS == []  # never ran
    return run


KINDS = ["pai.approve.sync", "pai.approve.async"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_requires_approval_tool_waits_then_runs_once_approved(kind: str) -> None:
    run = _asked(kind)
    runqueue.decide_tool(run.id, 3, "approve", actor="user:ana")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=run.id).result == "refund: refunded 400"
    assert REFUNDS == [(7, 400)]
    assert MODEL_CALLS == [0, 1, 2]  # the two first requests were replayed, not sent again
    assert ToolInvocation.objects.get(run_id=run.id, seq=3).status == "completed"


@pytest.mark.parametrize("kind", KINDS)
def test_an_edit_runs_the_tool_with_the_edited_arguments(kind: str) -> None:
    run = _asked(kind)
    runqueue.decide_tool(run.id, 3, "edit", actor="user:ana", arguments={"order": 7, "amount": 40})
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert REFUNDS == [(7, 40)]
    assert Run.objects.get(id=run.id).result == "refund: refunded 40"


@pytest.mark.parametrize("kind", KINDS)
def test_a_rejection_s_reason_is_the_tool_s_return(kind: str) -> None:
    run = _asked(kind)
    runqueue.decide_tool(run.id, 3, "reject", actor="user:ana", reason="over the limit")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert REFUNDS == []
    assert Run.objects.get(id=run.id).result == "refund: The call was rejected: over the limit"
    assert ToolInvocation.objects.get(run_id=run.id, seq=3).status == "rejected"


def test_a_response_stands_for_the_call() -> None:
    run = _asked("pai.approve.async")
    runqueue.decide_tool(run.id, 3, "respond", actor="user:ana", result="refunded by hand")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert REFUNDS == []
    assert Run.objects.get(id=run.id).result == "refund: refunded by hand"


def test_the_wrapper_s_approval_predicate_asks_only_when_it_says_so() -> None:
    plain = Agent(FunctionModel(script, model_name="m-approve"), name="predicate")
    plain.tool_plain(lookup)

    @plain.tool_plain
    def refund(order: int, amount: int) -> str:
        REFUNDS.append((order, amount))
        return f"refunded {amount}"

    large = RunqueueAgent(plain, approval={"refund": lambda args: args["amount"] > 1000})

    @runqueue.handler("pai.approve.predicate")
    async def predicate(ctx: Any) -> str:
        return (await large.run("refund order 7", ctx=ctx)).output

    run = runqueue.submit(kind="pai.approve.predicate").run
    # 400 is not over 1000: no wait.
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert REFUNDS == [(7, 400)]
    assert Run.objects.get(id=run.id).result == "refund: refunded 400"
