"""runqueue.contrib.pydantic_ai: an unchanged Pydantic AI agent run as
recorded steps of a run. A crash at every step boundary, then a retry:
each finished model request sent once, each tool run at most once, the
answer the same; a write cut short comes back uncertain and the model is
told so; a changed request refused; usage recorded once; streaming."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

import runqueue  # noqa: E402
from runqueue import leases, registry, testing  # noqa: E402
from runqueue.contrib import steps  # noqa: E402
from runqueue.contrib.pydantic_ai import RunqueueAgent, model_request  # noqa: E402
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation, Usage  # noqa: E402
from runqueue.runtime import aio
from tests.agents import pydantic_agents as agents  # noqa: E402
from tests.helpers import (
    claimed,  # noqa: E402
    expire_lease,  # noqa: E402
)

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ["pai.sync", "pai.async"]
#: An uninterrupted run's steps: model, tool, model, tool, model.
STEPS = [
    ("model:m-agent", "completed"),
    ("lookup_order", "completed"),
    ("model:m-agent", "completed"),
    ("refund", "completed"),
    ("model:m-agent", "completed"),
]
ANSWER = "refund of order 7: refunded 7"


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    """Stands in for the worker dying: nothing after it is recorded."""


@pytest.fixture(autouse=True)
def _fresh(settings) -> Iterator[None]:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
    agents.reset()
    yield
    aio.close_connections()


def _steps(run_id: Any) -> list[tuple[str, str]]:
    records = ToolInvocation.objects.filter(run_id=run_id).order_by("seq")
    return [(r.tool, r.status) for r in records]


def _crashed(exc: BaseException) -> bool:
    """A crash, bare or inside the exception groups a task group makes."""
    if isinstance(exc, _Crash | agents.Died):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_crashed(e) for e in exc.exceptions)
    return False


def _crash_after_outcomes(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """The worker dies right after the ``count``-th step outcome is recorded:
    at a step boundary."""
    real = leases.record_tool_outcome
    written = [0]

    def record(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        written[0] += 1
        if written[0] == count:
            raise _Crash
        return done

    monkeypatch.setattr(leases, "record_tool_outcome", record)


def _run_crashing(run_id: Any) -> None:
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - a crash, maybe grouped
        testing.execute(claimed(lease_seconds=30))
    assert _crashed(raised.value), raised.value
    expire_lease(run_id)
    leases.sweep()


@pytest.mark.parametrize("kind", KINDS)
def test_an_uninterrupted_run_records_each_request_and_call_once(kind: str) -> None:
    run = runqueue.submit(kind=kind, payload={"prompt": "refund order 7"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result == ANSWER
    assert _steps(run.id) == STEPS
    assert agents.MODEL_CALLS == [0, 1, 2]
    assert agents.TOOL_CALLS == [("lookup_order", 7), ("refund", 7)]
    records = list(ToolInvocation.objects.filter(run_id=run.id).order_by("seq"))
    first, lookup = records[0], records[1]
    assert first.idempotency == "idempotent"
    assert set(first.arguments) == {"request_sha256"}
    assert first.result["kind"] == steps.MODEL_RESPONSE
    assert first.result["tool_calls"] == [{"name": "lookup_order", "args": {"order": 7}}]
    assert first.result["usage"] == {"input_tokens": 100, "output_tokens": 10}
    assert first.result["raw"]["parts"][0]["tool_name"] == "lookup_order"
    assert records[4].result["text"] == ANSWER
    assert lookup.arguments == {"order": 7}
    assert lookup.idempotency == "idempotent"
    assert records[3].idempotency == "non_idempotent"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("boundary", [1, 2, 3, 4])
def test_a_crash_at_each_step_boundary_replays_what_finished(
    kind: str, boundary: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = runqueue.submit(kind=kind, payload={"prompt": "refund order 7"}).run
    with monkeypatch.context() as patch:
        _crash_after_outcomes(patch, boundary)
        _run_crashing(run.id)
    assert len(_steps(run.id)) == boundary
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result == ANSWER  # as an uninterrupted run answers
    assert _steps(run.id) == STEPS
    assert agents.MODEL_CALLS == [0, 1, 2]  # each request sent once
    assert agents.TOOL_CALLS == [("lookup_order", 7), ("refund", 7)]  # each tool run once
    assert run.attempts == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_cut_short_is_uncertain_and_the_model_is_told(kind: str) -> None:
    run = runqueue.submit(kind=kind, payload={"prompt": "refund order 7"}).run
    agents.DIE_IN.add("refund")  # after the side effect, before its outcome is recorded
    _run_crashing(run.id)
    assert _steps(run.id)[-1] == ("refund", "started")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert agents.TOOL_CALLS == [("lookup_order", 7), ("refund", 7)]  # never twice
    assert _steps(run.id) == [*STEPS[:3], ("refund", "uncertain"), STEPS[4]]
    assert "unknown" in run.result and "did not necessarily fail" in run.result
    assert agents.MODEL_CALLS == [0, 1, 2]


def test_an_idempotent_tool_cut_short_runs_again() -> None:
    run = runqueue.submit(kind="pai.async", payload={"prompt": "refund order 7"}).run
    agents.DIE_IN.add("lookup_order")
    _run_crashing(run.id)
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert agents.TOOL_CALLS == [("lookup_order", 7), ("lookup_order", 7), ("refund", 7)]
    assert _steps(run.id) == STEPS
    assert agents.MODEL_CALLS == [0, 1, 2]


def test_usage_is_recorded_once_per_response_and_a_replay_pays_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = runqueue.submit(kind="pai.sync", payload={"prompt": "refund order 7"}).run
    with monkeypatch.context() as patch:
        _crash_after_outcomes(patch, 3)  # two model responses recorded, then the crash
        _run_crashing(run.id)
    assert Usage.objects.filter(run_id=run.id).count() == 2
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    rows = Usage.objects.filter(run_id=run.id).order_by("attempt", "call")
    assert [(u.model, u.input_tokens, u.output_tokens, u.attempt) for u in rows] == [
        ("m-agent", 100, 10, 1),
        ("m-agent", 200, 10, 1),
        ("m-agent", 300, 10, 2),  # only the request the retry sent
    ]


def test_a_changed_tool_list_on_replay_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = runqueue.submit(kind="pai.async", payload={"prompt": "refund order 7"}).run
    with monkeypatch.context() as patch:
        _crash_after_outcomes(patch, 2)
        _run_crashing(run.id)
    recorded = ToolInvocation.objects.get(run_id=run.id, seq=0).arguments["request_sha256"]

    @agents.agent.tool_plain
    def cancel_order(order: int) -> str:  # a deploy added a tool meanwhile
        return "cancelled"

    try:
        assert testing.execute(claimed(lease_seconds=30)) == "failed"
    finally:
        del agents.agent._function_toolset.tools["cancel_order"]
    failure = Run.objects.get(id=run.id).failure
    assert failure["classification"] == "permanent"
    assert "model:m-agent" in failure["message"] and "other arguments" in failure["message"]
    assert ToolInvocation.objects.get(run_id=run.id, seq=0).arguments["request_sha256"] == recorded
    assert agents.MODEL_CALLS == [0]  # the changed request was never sent
    assert agents.TOOL_CALLS == [("lookup_order", 7)]


def test_a_request_hashes_the_same_on_every_attempt_and_differs_when_it_differs() -> None:
    """Two separate runs of the same conversation send requests with other
    timestamps and run ids: the same hashes all the same."""
    seen: list[list[str]] = []
    for _ in range(2):
        run = runqueue.submit(kind="pai.async", payload={"prompt": "refund order 7"}).run
        assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
        records = ToolInvocation.objects.filter(run_id=run.id, tool="model:m-agent")
        seen.append([r.arguments["request_sha256"] for r in records.order_by("seq")])
    assert seen[0] == seen[1]
    assert len(set(seen[0])) == 3
    other = runqueue.submit(kind="pai.async", payload={"prompt": "refund order 8"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    first = ToolInvocation.objects.filter(run_id=other.id).order_by("seq").first()
    assert first is not None and first.arguments["request_sha256"] != seen[0][0]


def test_the_hashed_request_leaves_out_clocks_and_run_ids() -> None:
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from pydantic_ai.models import ModelRequestParameters

    message = ModelRequest(parts=[UserPromptPart("hi")], run_id="r1")
    request = model_request((None, [message], None, ModelRequestParameters()))
    text = str(request)
    assert "timestamp" not in text and "r1" not in text and "hi" in text


def test_streamed_text_reaches_the_run_s_stream_and_only_the_response_is_recorded() -> None:
    run = runqueue.submit(kind="pai.stream", payload={"prompt": "refund order 7"}).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result.strip() == ANSWER
    chunks = EventLog.objects.filter(run_id=run.id, type="run.text").order_by("id")
    chars: list[str] = []
    for data in chunks.values_list("data", flat=True):
        chars[data["offset"] :] = list(data["text"])
    assert "".join(chars) == run.result  # the deltas, as a client assembles them
    assert _steps(run.id) == STEPS
    last = ToolInvocation.objects.filter(run_id=run.id).order_by("seq").last()
    assert last is not None and last.result["text"] == run.result


def test_outside_a_handler_the_agent_runs_as_it_always_did() -> None:
    result = agents.agent.run_sync("refund order 7")
    assert result.output == ANSWER
    assert agents.TOOL_CALLS == [("lookup_order", 7), ("refund", 7)]
    assert not ToolInvocation.objects.exists()


def test_tool_idempotency_comes_from_the_wrapper_metadata_or_defaults_to_non_idempotent() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from runqueue.contrib.pydantic_ai import tool_metadata

    agent = Agent(TestModel(), name="meta")

    @agent.tool_plain(metadata=tool_metadata(idempotent=True))
    def read(x: int) -> int:
        return x

    @agent.tool_plain
    def write(x: int) -> int:
        return x

    @agent.tool_plain
    def named(x: int) -> int:
        return x

    durable = RunqueueAgent(agent, idempotent={"named"})

    @runqueue.handler("pai.meta")
    async def meta(ctx: Any) -> str:
        return (await durable.run("go", ctx=ctx)).output

    run = runqueue.submit(kind="pai.meta").run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    tools = ToolInvocation.objects.filter(run_id=run.id).exclude(tool__startswith="model:")
    assert dict(tools.values_list("tool", "idempotency")) == {
        "read": "idempotent",
        "write": "non_idempotent",
        "named": "idempotent",
    }
    assert Run.objects.get(id=run.id).status == RunStatus.SUCCEEDED


def test_the_docs_conversion_runs_as_written() -> None:
    """docs/agents.md's "pydantic-ai-example" block, with a scripted model and a
    payments client: the change is under 15 lines, and its refund waits for
    an approval, then runs once."""
    from types import SimpleNamespace

    from pydantic_ai.models.function import FunctionModel

    from tests.database.docs.docs_blocks import named

    block = named("pydantic-ai-example")
    changed = [line for line in block.code.splitlines() if line.endswith("# runqueue")]
    assert 0 < len(changed) < 15
    refunds: list[int] = []
    namespace: dict[str, Any] = {
        "model": FunctionModel(agents.script, model_name=agents.MODEL),
        "payments": SimpleNamespace(refund=lambda order: refunds.append(order) or "refunded"),
    }
    # The block registers support.turn, as the versions guide's example does
    # (tests/database/docs): this test has the kind to itself, then gives it back.
    saved = {kind: dict(versions) for kind, versions in registry._handlers.items()}
    registry.unregister("support.turn")
    try:
        exec(compile(block.code, "docs/agents.md", "exec"), namespace)  # noqa: S102 - our docs
        run = runqueue.submit(kind="support.turn", payload={"prompt": "refund 7"}).run
        assert testing.execute(claimed(lease_seconds=30)) == "waiting"  # the refund: approval
        runqueue.decide_tool(run.id, 3, "approve", actor="user:ana")
        assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    finally:
        registry._handlers.clear()
        registry._handlers.update(saved)
        registry._served = None
    assert Run.objects.get(id=run.id).result == "refund of order 7: refunded"
    assert refunds == [7]


# --- Steering a running agent (on_busy="steer") ----------------------------------

PROMPT = "refund order 7"
#: A steered run's steps: the steer is read before the request after the lookup.
STEERED = [*STEPS[:2], (leases.STEERS_TOOL, "completed"), *STEPS[2:]]


def _steered_turn() -> Run:
    return runqueue.submit(
        kind="pai.steered", session_id=agents.SESSION, payload={"text": PROMPT}
    ).run


def _steers_of(run_id: Any) -> list[Any]:
    records = ToolInvocation.objects.filter(run_id=run_id, tool=leases.STEERS_TOOL)
    return [r.result["payloads"] for r in records.order_by("seq")]


def _session_idle() -> None:
    """Every steer was taken: nothing of the session is left to run."""
    left = Run.objects.filter(session_id=agents.SESSION).exclude(
        status__in=[RunStatus.SUCCEEDED, RunStatus.CANCELLED]
    )
    assert list(left.values_list("payload", "status")) == []


def test_a_steer_sent_while_a_tool_runs_reaches_the_next_model_request_once() -> None:
    run = _steered_turn()
    agents.STEER_IN["lookup_order"] = ["make it quick"]
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert agents.PROMPTS == [
        [PROMPT],
        [PROMPT, "make it quick"],  # the request after the tool that ran while it came
        [PROMPT, "make it quick"],  # it stays in the conversation, once
    ]
    assert _steps(run.id) == STEERED
    assert _steers_of(run.id) == [[{"text": "make it quick"}]]
    steer = Run.objects.get(session_id=agents.SESSION, payload={"text": "make it quick"})
    assert steer.status == RunStatus.CANCELLED
    assert EventLog.objects.get(run_id=steer.id, type="run.cancelled").data["reason"] == "steered"
    _session_idle()


def test_without_steering_the_message_is_the_session_s_next_turn() -> None:
    run = _steered_turn()
    agents.STEER_IN["lookup_order"] = ["make it quick"]
    quiet = RunqueueAgent(agents.agent, idempotent={"lookup_order"}, steer=None)

    @runqueue.handler("pai.unsteered")
    async def unsteered(ctx: Any) -> str:
        return (await quiet.run(ctx.payload["text"], ctx=ctx)).output

    Run.objects.filter(id=run.id).update(kind="pai.unsteered")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert agents.PROMPTS == [[PROMPT]] * 3
    assert _steps(run.id) == STEPS
    nxt = Run.objects.get(session_id=agents.SESSION, payload={"text": "make it quick"})
    assert nxt.status == RunStatus.QUEUED  # never lost: it runs next


@pytest.mark.parametrize("crash", ["after-the-steer-was-read", "after-the-request-it-went-in"])
def test_a_worker_lost_after_a_steer_was_read_replays_it_once_and_loses_none(
    crash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay gives the model the same messages at the same point (the
    replayed request's hash matches its record); a message sent meanwhile
    and one sent during the retry each arrive once, after it, in order."""
    run = _steered_turn()
    agents.STEER_IN["lookup_order"] = ["A"]
    with monkeypatch.context() as patch:
        if crash == "after-the-steer-was-read":
            taken = leases.take_steers

            def take_then_die(*args: Any, **kwargs: Any) -> Any:
                taken(*args, **kwargs)
                raise _Crash

            patch.setattr(leases, "take_steers", take_then_die)
            sent_first = [[PROMPT]]
        else:
            _crash_after_outcomes(patch, 3)  # model, lookup, model (the steer with it)
            sent_first = [[PROMPT], [PROMPT, "A"]]
        _run_crashing(run.id)
    assert agents.PROMPTS == sent_first
    assert _steers_of(run.id) == [[{"text": "A"}]]
    agents.PROMPTS.clear()
    recorded = list(
        ToolInvocation.objects.filter(run_id=run.id, tool="model:m-agent").values_list(
            "arguments", flat=True
        )
    )
    agents.steer("B")  # while the run waits for its retry
    agents.STEER_IN["refund"] = ["C"]  # while the retry runs
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    resent = [[PROMPT, "A"]] if crash == "after-the-steer-was-read" else []
    assert agents.PROMPTS == [*resent, [PROMPT, "A", "B", "C"]]
    assert _steps(run.id) == [*STEERED[:5], (leases.STEERS_TOOL, "completed"), STEERED[5]]
    assert _steers_of(run.id) == [[{"text": "A"}], [{"text": "B"}, {"text": "C"}]]
    again = ToolInvocation.objects.filter(run_id=run.id, tool="model:m-agent").order_by("seq")
    assert list(again.values_list("arguments", flat=True))[: len(recorded)] == recorded
    assert agents.TOOL_CALLS == [("lookup_order", 7), ("refund", 7)]
    _session_idle()
