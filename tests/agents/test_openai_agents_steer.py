"""runqueue.contrib.openai_agents: a message sent to steer a running agent
(``on_busy="steer"``) reaches the model request after the tool it came
during, once, as the user's words, and stays in the conversation; a worker
lost after it was read replays it at the same point and reads a newer one
once, after it. A scripted model (no network) and real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, function_tool, set_tracing_disabled  # noqa: E402

import runqueue  # noqa: E402
from runqueue import leases, testing  # noqa: E402
from runqueue.contrib.openai_agents import SESSION_STEP, Runner  # noqa: E402
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation  # noqa: E402
from runqueue.runtime import aio
from tests.agents.openai_support import ScriptedModel, call, calls, say  # noqa: E402
from tests.agents.test_openai_agents import CrashAfter  # noqa: E402
from tests.helpers import (
    claimed,  # noqa: E402
    expire_lease,  # noqa: E402
)

pytestmark = pytest.mark.django_db(transaction=True)
set_tracing_disabled(True)

SESSION = "oa-chat"
PROMPT = "refund order 7"
#: Tool name to messages sent to steer the session while that tool runs.
STEER_IN: dict[str, list[str]] = {}
RAN: list[str] = []


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    """Stands in for the worker dying: nothing is recorded after it."""


def _steer(text: str) -> None:
    sent = runqueue.submit(
        kind="oa.steered", session_id=SESSION, payload={"text": text}, on_busy="steer"
    )
    assert sent.outcome == "steered", sent.outcome


async def _tool_ran(name: str) -> None:
    RAN.append(name)
    for text in STEER_IN.pop(name, []):
        await aio.db(_steer, text)


@function_tool
async def lookup_order(order_id: int) -> str:
    """Look an order up."""
    await _tool_ran("lookup_order")
    return "order 7: 40 EUR"


@function_tool
async def refund(order_id: int) -> str:
    """Refund an order."""
    await _tool_ran("refund")
    return "refunded 7"


def policy(items: list[dict[str, Any]]) -> list[Any]:
    made = calls(items)
    if "lookup_order" not in made:
        return [call("lookup_order", {"order_id": 7}, items)]
    if "refund" not in made:
        return [call("refund", {"order_id": 7}, items)]
    return [say("done")]


MODEL = ScriptedModel(policy, name="steer-1")
agent = Agent(name="support", instructions="Help.", model=MODEL, tools=[lookup_order, refund])


@runqueue.handler("oa.steered")
def steered_turn(ctx: runqueue.RunContext) -> str:
    crash = ctx.payload.get("crash_after") if ctx.attempt == 1 else None
    options: dict[str, Any] = {"steer": None} if ctx.payload.get("unsteered") else {}
    result = Runner.run_sync(
        agent, ctx.payload["text"], ctx=ctx, hooks=CrashAfter(crash), **options
    )
    return str(result.final_output)


@pytest.fixture(autouse=True)
def _fresh(fast_retry: None) -> Iterator[None]:
    STEER_IN.clear()
    RAN.clear()
    MODEL.sent.clear()
    MODEL.requests.clear()
    yield
    aio.close_connections()


def _turn(**payload: Any) -> Run:
    return runqueue.submit(
        kind="oa.steered", session_id=SESSION, payload={"text": PROMPT, **payload}
    ).run


def _said() -> list[list[str]]:
    """What the user said, as each model request carried it."""
    return [[i["content"] for i in items if i.get("role") == "user"] for items in MODEL.requests]


def _steps(run: Run) -> list[str]:
    records = ToolInvocation.objects.filter(run_id=run.id).exclude(tool=SESSION_STEP)
    return list(records.order_by("seq").values_list("tool", flat=True))


def _steers_of(run: Run) -> list[Any]:
    records = ToolInvocation.objects.filter(run_id=run.id, tool=leases.STEERS_TOOL)
    return [r.result["payloads"] for r in records.order_by("seq")]


def _session_idle() -> None:
    left = Run.objects.filter(session_id=SESSION).exclude(
        status__in=[RunStatus.SUCCEEDED, RunStatus.CANCELLED]
    )
    assert list(left.values_list("payload", "status")) == []


M, S = "model:steer-1", leases.STEERS_TOOL


def test_a_steer_sent_while_a_tool_runs_reaches_the_next_model_request_once() -> None:
    run = _turn()
    STEER_IN["lookup_order"] = ["make it quick"]
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert _said() == [[PROMPT], [PROMPT, "make it quick"], [PROMPT, "make it quick"]]
    last = MODEL.requests[-1]
    steer_at = next(n for n, i in enumerate(last) if i.get("content") == "make it quick")
    assert [i.get("type") for i in last[steer_at - 2 : steer_at]] == [
        "function_call",
        "function_call_output",
    ]  # where it came: after the lookup's output
    assert _steps(run) == [M, "lookup_order", S, M, "refund", M]
    assert _steers_of(run) == [[{"text": "make it quick"}]]
    steer = Run.objects.get(session_id=SESSION, payload={"text": "make it quick"})
    assert EventLog.objects.get(run_id=steer.id, type="run.cancelled").data["reason"] == "steered"
    _session_idle()


def test_without_steering_the_message_is_the_session_s_next_turn() -> None:
    run = _turn(unsteered=True)
    STEER_IN["lookup_order"] = ["make it quick"]
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert _said() == [[PROMPT]] * 3
    assert _steps(run) == [M, "lookup_order", M, "refund", M]
    nxt = Run.objects.get(session_id=SESSION, payload={"text": "make it quick"})
    assert nxt.status == RunStatus.QUEUED


@pytest.mark.parametrize("crash", ["after-the-steer-was-read", "after-the-request-it-went-in"])
def test_a_worker_lost_after_a_steer_was_read_replays_it_once_and_loses_none(
    crash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    STEER_IN["lookup_order"] = ["A"]
    with monkeypatch.context() as patch:
        if crash == "after-the-steer-was-read":
            run = _turn()
            taken = leases.take_steers

            def take_then_die(*args: Any, **kwargs: Any) -> Any:
                taken(*args, **kwargs)
                raise _Crash

            patch.setattr(leases, "take_steers", take_then_die)
            sent_first = [[PROMPT]]
        else:
            run = _turn(crash_after=3)  # model, lookup, model (the steer with it)
            sent_first = [[PROMPT], [PROMPT, "A"]]
        with pytest.raises(BaseException) as raised:  # noqa: PT011 - this or the hooks' crash
            testing.execute(claimed(lease_seconds=30))
        assert type(raised.value).__name__ == "_Crash", raised.value
    assert _said() == sent_first
    assert _steers_of(run) == [[{"text": "A"}]]
    MODEL.requests.clear()
    expire_lease(run.id)
    leases.sweep()
    _steer("B")  # while the run waits for its retry
    STEER_IN["refund"] = ["C"]  # while the retry runs
    # A replayed request matches its record.
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    resent = [[PROMPT, "A"]] if crash == "after-the-steer-was-read" else []
    assert _said() == [*resent, [PROMPT, "A", "B", "C"]]
    assert _steps(run) == [M, "lookup_order", S, M, "refund", S, M]
    assert _steers_of(run) == [[{"text": "A"}], [{"text": "B"}, {"text": "C"}]]
    assert RAN == ["lookup_order", "refund"]
    _session_idle()
