"""Async handlers through the runtime: the awaited ctx calls keep the sync
ones' semantics (replay, uncertain, failures, the fence). The database work
runs on the loop's database threads, so these tests commit (transaction)."""

from __future__ import annotations

import asyncio

import pytest

import runqueue
from runqueue import Idempotency, leases, runtime, testing
from runqueue.models import Run, RunStatus, ToolInvocation
from runqueue.runtime import aio
from tests.helpers import claimed, event_types, expire_lease

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_loop_connections():
    """The loop's database threads outlive a test; their connections do not."""
    yield
    aio.close_connections()


CALLS: list[tuple[str, str]] = []


async def lookup(idempotency_key: str) -> dict:
    await asyncio.sleep(0)
    CALLS.append(("lookup", idempotency_key))
    return {"tool": "lookup"}


def charge(idempotency_key: str) -> dict:  # a sync tool in an async handler: run in a thread
    CALLS.append(("charge", idempotency_key))
    return {"tool": "charge"}


async def timeout() -> None:
    raise runqueue.UncertainOutcome("timed out after sending")


@runqueue.handler("rt.async_tools")
async def async_tools(ctx: runtime.AsyncRunContext) -> list:
    out = []
    for name, fn, idem in (
        ("lookup", lookup, Idempotency.IDEMPOTENT),
        ("charge", charge, Idempotency.NON_IDEMPOTENT),
        ("timeout", timeout, Idempotency.NON_IDEMPOTENT),
    ):
        outcome = await ctx.invoke_tool(name, fn, idempotency=idem)
        out.append([name, outcome.status, outcome.replayed])
    await ctx.checkpoint({"done": len(out)})
    return out


@runqueue.handler("rt.async_fails")
async def async_fails(ctx: runtime.AsyncRunContext) -> None:
    await asyncio.sleep(0)
    if ctx.payload["error"] == "transient":
        raise runqueue.TransientError("rate limited")
    raise runqueue.PermanentError("card declined")


def test_async_tools_record_and_replay_like_sync_ones(fast_retry) -> None:
    CALLS.clear()
    sub = runqueue.submit(kind="rt.async_tools")
    first = claimed("w1")
    # An earlier attempt: the lookup completed, the charge started, then the worker died.
    leases.record_tool_started(
        first, seq=0, tool="lookup", idempotency=Idempotency.IDEMPOTENT, arguments={}
    )
    leases.record_tool_outcome(first, seq=0, status="completed", result={"tool": "lookup"})
    leases.record_tool_started(
        first, seq=1, tool="charge", idempotency=Idempotency.NON_IDEMPOTENT, arguments={}
    )
    expire_lease(sub.run.id)
    leases.sweep()
    assert testing.execute(claimed("w1")) == "succeeded"
    run = Run.objects.get(id=sub.run.id)
    assert run.result == [
        ["lookup", "completed", True],
        ["charge", "uncertain", False],
        ["timeout", "uncertain", False],
    ]
    assert CALLS == []  # nothing ran again: replayed, or uncertain
    statuses = dict(ToolInvocation.objects.filter(run_id=run.id).values_list("seq", "status"))
    assert statuses == {0: "completed", 1: "uncertain", 2: "uncertain"}
    assert event_types(run.id).count("tool.uncertain") == 2


def test_a_first_attempt_runs_every_async_and_sync_tool_once() -> None:
    CALLS.clear()
    sub = runqueue.submit(kind="rt.async_tools")
    assert testing.execute(claimed("w1")) == "succeeded"
    assert CALLS == [("lookup", f"{sub.run.id}:0"), ("charge", f"{sub.run.id}:1")]
    assert Run.objects.get(id=sub.run.id).result[2] == ["timeout", "uncertain", False]


@pytest.mark.parametrize(("error", "label"), [("transient", "requeued"), ("permanent", "failed")])
def test_an_async_handlers_failure_is_classified_like_a_sync_ones(error, label) -> None:
    sub = runqueue.submit(kind="rt.async_fails", payload={"error": error})
    assert testing.execute(claimed("w1")) == label
    status = Run.objects.get(id=sub.run.id).status
    assert status == (RunStatus.QUEUED if label == "requeued" else RunStatus.FAILED)


def test_an_async_handler_that_lost_its_lease_writes_nothing() -> None:
    sub = runqueue.submit(kind="rt.async_tools")
    lease = claimed("w1")
    runqueue.cancel(sub.run.id, reason="test", actor="t")  # the epoch moves on
    assert testing.execute(lease) == "fenced"
    assert not ToolInvocation.objects.filter(run_id=sub.run.id).exists()
    assert Run.objects.get(id=sub.run.id).status == RunStatus.CANCELLED
