"""runqueue.contrib.openai_agents: an unchanged OpenAI Agents SDK agent run
durably. A scripted model (no network) and real PostgreSQL; a crash is a
BaseException raised at a step boundary, then the lease expires and the run
is claimed again, as after a worker's death."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunHooks, function_tool, handoff, set_tracing_disabled  # noqa: E402

import runqueue  # noqa: E402
from runqueue import events, leases, testing  # noqa: E402
from runqueue.contrib import openai_agents  # noqa: E402
from runqueue.contrib.openai_agents import Runner  # noqa: E402
from runqueue.models import EventLog, Run, ToolInvocation, Usage  # noqa: E402
from runqueue.runtime import aio
from tests.agents.openai_support import (  # noqa: E402
    ScriptedModel,
    call,
    calls,
    outputs,
    say,
)
from tests.helpers import (
    claimed,  # noqa: E402
    expire_lease,  # noqa: E402
)

pytestmark = pytest.mark.django_db(transaction=True)
set_tracing_disabled(True)

RAN: list[tuple[str, Any]] = []  # every tool body that ran, in order
CRASH_IN_TOOL: set[str] = set()  # tools whose body dies mid-call (first attempt only)


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    """Stands in for the worker dying: nothing is recorded after it."""


@function_tool
def lookup_order(order_id: int) -> dict:
    """Look an order up."""
    RAN.append(("lookup_order", order_id))
    return {"id": order_id, "total": 40}


@function_tool
def refund(order_id: int) -> str:
    """Refund an order."""
    RAN.append(("refund", order_id))
    if "refund" in CRASH_IN_TOOL:
        CRASH_IN_TOOL.discard("refund")
        raise _Crash
    return f"refunded {order_id}"


def support_policy(items: list[dict[str, Any]]) -> list[Any]:
    """model -> lookup -> model -> refund -> model: final."""
    made = calls(items)
    if "lookup_order" not in made:
        return [call("lookup_order", {"order_id": 7}, items)]
    if "refund" not in made:
        return [call("refund", {"order_id": 7}, items)]
    seen = outputs(items)
    return [say(f"Done. lookup={seen['lookup_order']} refund={seen['refund']}")]


MODEL = ScriptedModel(support_policy)
support_agent = Agent(
    name="support", instructions="Help.", model=MODEL, tools=[lookup_order, refund]
)


class CrashAfter(RunHooks):
    """Dies after the n-th finished step (model response or tool call)."""

    def __init__(self, n: int | None) -> None:
        self.n = n
        self.seen = 0

    def _step(self) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise _Crash

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self._step()

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        self._step()


@runqueue.handler("oa.support")
def support_turn(ctx: runqueue.RunContext) -> dict:
    crash = ctx.payload.get("crash_after") if ctx.attempt == 1 else None
    result = Runner.run_sync(
        support_agent,
        ctx.payload["text"],
        ctx=ctx,
        hooks=CrashAfter(crash),
        idempotent=set(ctx.payload.get("idempotent", [])),
    )
    return {"answer": result.final_output, "agent": result.last_agent.name}


@pytest.fixture(autouse=True)
def _fresh(fast_retry: None) -> Iterator[None]:
    RAN.clear()
    CRASH_IN_TOOL.clear()
    MODEL.sent.clear()
    MODEL.requests.clear()
    yield
    aio.close_connections()


def _crash_then_finish(run: Run) -> str:
    with pytest.raises(_Crash):
        testing.execute(claimed(lease_seconds=30))
    expire_lease(run.id)
    leases.sweep()
    return testing.execute(claimed(lease_seconds=30))


def _steps(run: Run) -> list[tuple[str, str]]:
    return list(
        ToolInvocation.objects.filter(run_id=run.id).order_by("seq").values_list("tool", "status")
    )


def test_an_uninterrupted_run_records_each_model_request_and_tool_call() -> None:
    run = runqueue.submit(kind="oa.support", payload={"text": "refund order 7"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result == {
        "answer": "Done. lookup={'id': 7, 'total': 40} refund=refunded 7",
        "agent": "support",
    }
    assert _steps(run) == [
        ("model:scripted-1", "completed"),
        ("lookup_order", "completed"),
        ("model:scripted-1", "completed"),
        ("refund", "completed"),
        ("model:scripted-1", "completed"),
    ]
    first = ToolInvocation.objects.get(run_id=run.id, seq=0)
    assert first.idempotency == "idempotent"
    assert first.result["kind"] == "model_response"
    assert first.result["tool_calls"][0]["name"] == "lookup_order"
    assert first.result["finish_reason"] == "tool_calls"
    assert first.result["usage"] == {"input_tokens": 10, "output_tokens": 5}
    assert set(first.arguments) == {"request_sha256"}
    last = ToolInvocation.objects.get(run_id=run.id, seq=4)
    assert last.result["text"] == run.result["answer"]
    assert last.result["finish_reason"] == "stop"
    tool = ToolInvocation.objects.get(run_id=run.id, seq=1)
    assert (tool.arguments, tool.result, tool.idempotency) == (
        {"order_id": 7},
        {"id": 7, "total": 40},
        "non_idempotent",
    )
    assert RAN == [("lookup_order", 7), ("refund", 7)]


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4, 5])
def test_a_crash_at_each_step_boundary_replays_what_finished(crash_after: int) -> None:
    plain = runqueue.submit(kind="oa.support", payload={"text": "refund order 7"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    plain.refresh_from_db()
    RAN.clear()
    MODEL.sent.clear()

    run = runqueue.submit(
        kind="oa.support", payload={"text": "refund order 7", "crash_after": crash_after}
    ).run
    assert _crash_then_finish(run) == "succeeded"
    run.refresh_from_db()
    assert run.result == plain.result  # the same answer as a run that never crashed
    assert len(MODEL.sent) == 3 and len(set(MODEL.sent)) == 3  # each request sent once
    assert RAN == [("lookup_order", 7), ("refund", 7)]  # each tool ran once
    assert all(status == "completed" for _, status in _steps(run))
    assert len(_steps(run)) == 5


def test_usage_is_recorded_once_per_response_and_a_replay_pays_nothing() -> None:
    run = runqueue.submit(
        kind="oa.support", payload={"text": "refund order 7", "crash_after": 4}
    ).run
    assert _crash_then_finish(run) == "succeeded"
    rows = list(Usage.objects.filter(run_id=run.id).values_list("model", "input_tokens"))
    assert rows == [("scripted-1", 10)] * 3  # three responses, three rows; none on replay


def test_a_non_idempotent_tool_its_worker_died_in_ends_uncertain_and_the_model_is_told() -> None:
    CRASH_IN_TOOL.add("refund")
    run = runqueue.submit(kind="oa.support", payload={"text": "refund order 7"}).run
    assert _crash_then_finish(run) == "succeeded"
    assert RAN == [("lookup_order", 7), ("refund", 7)]  # the refund did not run again
    assert ToolInvocation.objects.get(run_id=run.id, seq=3).status == "uncertain"
    told = outputs(MODEL.requests[-1])["refund"]
    assert "unknown" in told and "may or may not have happened" in told
    assert "failed" not in told.split(":")[0]


def test_an_idempotent_tool_its_worker_died_in_runs_again() -> None:
    CRASH_IN_TOOL.add("refund")
    run = runqueue.submit(
        kind="oa.support", payload={"text": "refund order 7", "idempotent": ["refund"]}
    ).run
    assert _crash_then_finish(run) == "succeeded"
    assert RAN == [("lookup_order", 7), ("refund", 7), ("refund", 7)]
    refund_step = ToolInvocation.objects.get(run_id=run.id, seq=3)
    assert (refund_step.status, refund_step.idempotency) == ("completed", "idempotent")
    assert "refunded 7" in Run.objects.get(id=run.id).result["answer"]


# --- A replay that meets another request ------------------------------------


@function_tool
def escalate(reason: str) -> str:
    """Hand the case to a person."""
    return "escalated"


CHANGED_TOOLS: list[Any] = [lookup_order, refund]


@runqueue.handler("oa.changing")
def changing_turn(ctx: runqueue.RunContext) -> dict:
    agent = Agent(name="support", instructions="Help.", model=MODEL, tools=list(CHANGED_TOOLS))
    crash = 2 if ctx.attempt == 1 else None
    result = Runner.run_sync(agent, "refund order 7", ctx=ctx, hooks=CrashAfter(crash))
    return {"answer": result.final_output}


def test_a_changed_tool_list_on_replay_is_a_permanent_error_naming_both() -> None:
    run = runqueue.submit(kind="oa.changing").run
    with pytest.raises(_Crash):
        testing.execute(claimed(lease_seconds=30))
    CHANGED_TOOLS.append(escalate)  # a deploy between the attempts added a tool
    try:
        expire_lease(run.id)
        leases.sweep()
        assert testing.execute(claimed(lease_seconds=30)) == "failed"
    finally:
        CHANGED_TOOLS.remove(escalate)
    run.refresh_from_db()
    message = run.failure["message"]
    assert "model request #0 does not match the run's record" in message
    assert "recorded model:scripted-1" in message and "request_sha256" in message
    assert '"tools": ["lookup_order", "refund", "escalate"]' in message
    assert RAN == [("lookup_order", 7)]  # nothing ran on the failed replay


# --- Handoffs and agents as tools --------------------------------------------


def billing_policy(items: list[dict[str, Any]]) -> list[Any]:
    if "refund" not in calls(items):
        return [call("refund", {"order_id": 9}, items)]
    return [say(f"Billing here: {outputs(items)['refund']}")]


def triage_policy(items: list[dict[str, Any]]) -> list[Any]:
    return [call("transfer_to_billing", {}, items)]


BILLING = ScriptedModel(billing_policy, name="billing-1")
TRIAGE = ScriptedModel(triage_policy, name="triage-1")
billing_agent = Agent(name="billing", instructions="Refunds.", model=BILLING, tools=[refund])
triage_agent = Agent(
    name="triage", instructions="Route.", model=TRIAGE, handoffs=[handoff(billing_agent)]
)


@runqueue.handler("oa.handoff")
def handoff_turn(ctx: runqueue.RunContext) -> dict:
    crash = ctx.payload.get("crash_after") if ctx.attempt == 1 else None
    result = Runner.run_sync(triage_agent, "refund 9", ctx=ctx, hooks=CrashAfter(crash))
    return {"answer": result.final_output, "agent": result.last_agent.name}


@pytest.mark.parametrize("crash_after", [None, 2])
def test_a_handoff_runs_the_next_agent_as_steps_of_the_run(crash_after: int | None) -> None:
    BILLING.sent.clear()
    TRIAGE.sent.clear()
    run = runqueue.submit(kind="oa.handoff", payload={"crash_after": crash_after}).run
    if crash_after:
        assert _crash_then_finish(run) == "succeeded"
    else:
        assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result == {"answer": "Billing here: refunded 9", "agent": "billing"}
    assert _steps(run) == [
        ("model:triage-1", "completed"),
        ("model:billing-1", "completed"),
        ("refund", "completed"),
        ("model:billing-1", "completed"),
    ]
    assert (len(TRIAGE.sent), len(BILLING.sent)) == (1, 2)
    assert RAN == [("refund", 9)]


def researcher_policy(items: list[dict[str, Any]]) -> list[Any]:
    if "lookup_order" not in calls(items):
        return [call("lookup_order", {"order_id": 3}, items)]
    return [say(f"order 3 total is {outputs(items)['lookup_order']}")]


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
    tools=[researcher.as_tool(tool_name="research", tool_description="Research a question.")],
)


@runqueue.handler("oa.as_tool")
def as_tool_turn(ctx: runqueue.RunContext) -> dict:
    crash = ctx.payload.get("crash_after") if ctx.attempt == 1 else None
    result = Runner.run_sync(manager, "what is order 3?", ctx=ctx, hooks=CrashAfter(crash))
    return {"answer": result.final_output}


@pytest.mark.parametrize("crash_after", [None, 1])
def test_an_agent_used_as_a_tool_records_its_own_steps(crash_after: int | None) -> None:
    """The inner agent's model requests and tools are steps of the run: a
    crash inside it replays what it had finished (here: the hooks of the
    outer run count only the manager's first response)."""
    RESEARCHER.sent.clear()
    MANAGER.sent.clear()
    run = runqueue.submit(kind="oa.as_tool", payload={"crash_after": crash_after}).run
    if crash_after:
        assert _crash_then_finish(run) == "succeeded"
    else:
        assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result == {"answer": "Manager: order 3 total is {'id': 3, 'total': 40}"}
    assert _steps(run) == [
        ("model:manager-1", "completed"),
        ("model:researcher-1", "completed"),
        ("lookup_order", "completed"),
        ("model:researcher-1", "completed"),
        ("model:manager-1", "completed"),
    ]
    assert (len(MANAGER.sent), len(RESEARCHER.sent)) == (2, 2)
    assert RAN == [("lookup_order", 3)]


# --- Streaming ------------------------------------------------------------------


@runqueue.handler("oa.streamed")
async def streamed_turn(ctx: runqueue.AsyncRunContext) -> dict:
    result = Runner.run_streamed(support_agent, ctx.payload["text"], ctx=ctx)
    deltas = [
        event.data.delta
        async for event in result.stream_events()
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta"
    ]
    return {"answer": result.final_output, "deltas": len(deltas)}


def _text(run_id: object) -> str:
    chunks = EventLog.objects.filter(run_id=run_id, type=events.TEXT).order_by("id")
    chars: list[str] = []
    for data in chunks.values_list("data", flat=True):
        chars[data["offset"] :] = list(data["text"])
    return "".join(chars)


def test_a_streamed_run_sends_its_text_deltas_to_the_runs_stream() -> None:
    run = runqueue.submit(kind="oa.streamed", payload={"text": "refund order 7"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    answer = run.result["answer"]
    assert answer.startswith("Done. lookup=")
    assert run.result["deltas"] > 1  # the SDK's own stream saw them live too
    assert _text(run.id) == answer  # the run's stream carried the text
    final = ToolInvocation.objects.filter(run_id=run.id).order_by("seq").last()
    assert final.result["text"] == answer  # the record holds the final response only
    assert RAN == [("lookup_order", 7), ("refund", 7)]


# --- The session as the conversation ------------------------------------------


def memory_policy(items: list[dict[str, Any]]) -> list[Any]:
    said = [
        i["content"] for i in items if i.get("role") == "user" and isinstance(i["content"], str)
    ]
    return [say(f"You said: {' | '.join(said)}")]


MEMORY = ScriptedModel(memory_policy, name="memory-1")
memory_agent = Agent(name="memory", instructions="Remember.", model=MEMORY)


@runqueue.handler("oa.chat")
def chat_turn(ctx: runqueue.RunContext) -> dict:
    crash = ctx.payload.get("crash_after") if ctx.attempt == 1 else None
    result = Runner.run_sync(memory_agent, ctx.payload["text"], ctx=ctx, hooks=CrashAfter(crash))
    return {"answer": result.final_output}


def test_the_sessions_second_turn_sees_the_first_and_a_replay_writes_no_item_twice() -> None:
    first = runqueue.submit(
        kind="oa.chat", session_id="chat-1", payload={"text": "hi", "crash_after": 1}
    ).run
    assert _crash_then_finish(first) == "succeeded"
    second = runqueue.submit(kind="oa.chat", session_id="chat-1", payload={"text": "again"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    other = runqueue.submit(kind="oa.chat", session_id="chat-2", payload={"text": "alone"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"

    second.refresh_from_db()
    assert second.result == {"answer": "You said: hi | again"}
    other.refresh_from_db()
    assert other.result == {"answer": "You said: alone"}  # another session sees nothing
    history = MEMORY.requests[-2]  # what turn 2 sent: turn 1's items, then its own input
    assert [i.get("content") for i in history if i.get("role") == "user"] == ["hi", "again"]
    assert sum(1 for i in history if i.get("role") == "assistant") == 1
    session_steps = ToolInvocation.objects.filter(run_id=first.id, tool=openai_agents.SESSION_STEP)
    added = [item for step in session_steps for item in step.result["items"]]
    assert len(added) == 2  # the user's "hi" and the answer: once each, the crash notwithstanding


def test_a_fenced_worker_writes_no_session_item() -> None:
    run = runqueue.submit(kind="oa.chat", session_id="chat-3", payload={"text": "hi"}).run
    lease = claimed(lease_seconds=30)
    runqueue.cancel(run.id, reason="stop", actor="test")
    assert testing.execute(lease) == "fenced"
    assert not ToolInvocation.objects.filter(run_id=run.id).exists()
