"""A handler's calls are numbered in the order it makes them, and a replay
hands each call its own record, or refuses the replay.

An async handler may make several calls at once (``asyncio.gather``): each
takes its number on the event loop when it is made, before any database
work, so the threads that record the calls cannot reorder them. A replayed
call whose kind, tool or arguments differ from its record fails the run
permanently instead of returning another call's outcome."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

import runqueue
from runqueue import Idempotency, leases, runtime, testing
from runqueue.leases import payload_digest
from runqueue.models import PriorityClass, Run, RunStatus, Schedule, ToolInvocation
from runqueue.runtime import aio
from runqueue.schedules.owned import name_of
from tests.helpers import claimed, expire_lease

pytestmark = pytest.mark.django_db(transaction=True)

N = 8
INTER = PriorityClass.INTERACTIVE
#: The tool calls that ran (not replayed): (run id, i).
RAN: list[tuple[str, int]] = []


@pytest.fixture(autouse=True)
def _clean():
    RAN.clear()
    yield
    aio.close_connections()


async def echo(run: str, i: int, **_more: Any) -> dict:
    await asyncio.sleep(0)
    RAN.append((run, i))
    return {"i": i}


def sync_echo(run: str, i: int, **_more: Any) -> dict:  # run in a thread of its own
    RAN.append((run, i))
    return {"i": i}


async def _gathered(calls: list, order: str) -> list:
    """Await the calls at once: in the order made, or reversed."""
    if order == "made":
        return list(await asyncio.gather(*calls))
    return list(reversed(await asyncio.gather(*reversed(calls))))


@runqueue.handler("order.tools")
async def gathered_tools(ctx: runtime.AsyncRunContext) -> Any:
    run = str(ctx.run.id)
    calls = [
        ctx.invoke_tool(
            "echo",
            echo if i % 2 else sync_echo,
            args={"run": run, "i": i},
            idempotency=Idempotency.NON_IDEMPOTENT,
        )
        for i in range(N)
    ]
    outcomes = await _gathered(calls, ctx.payload["order"])
    return [[o.seq, o.status, o.value, o.replayed] for o in outcomes]


@runqueue.handler("order.spawns")
async def gathered_spawns(ctx: runtime.AsyncRunContext) -> Any:
    calls = [ctx.spawn("order.child", {"i": i}) for i in range(N)]
    ids = await _gathered(calls, ctx.payload["order"])
    return [str(i) for i in ids]


@runqueue.handler("order.schedules")
async def gathered_schedules(ctx: runtime.AsyncRunContext) -> Any:
    calls = [ctx.schedule("order.child", {"i": i}, run_at=dt.timedelta(hours=1)) for i in range(N)]
    ids = await _gathered(calls, ctx.payload["order"])
    return [str(i) for i in ids]


@runqueue.handler("order.child")
def child(ctx: runtime.RunContext) -> Any:
    return ctx.payload


def _crash_after_the_handler(lease: leases.Lease) -> None:
    """Run the handler, then lose the worker before its outcome is written:
    the lease expires and the sweeper queues the run again."""
    runtime.decide(lease)
    expire_lease(lease.run_id)
    assert len(leases.sweep()) == 1
    Run.objects.filter(id=lease.run_id).update(scheduled_for=None)


@pytest.mark.parametrize("order", ["made", "reversed"])
def test_gathered_tool_calls_are_recorded_and_replayed_in_the_order_made(order: str) -> None:
    """Call i is record i on the first attempt; on the second each call
    gets its own record back and no tool runs again."""
    run = runqueue.submit(kind="order.tools", payload={"order": order}).run
    _crash_after_the_handler(claimed(classes=[INTER]))
    records = ToolInvocation.objects.filter(run_id=run.id).order_by("seq")
    assert [(r.seq, r.arguments["i"], r.result) for r in records] == [
        (i, i, {"i": i}) for i in range(N)
    ]
    assert testing.execute(claimed(classes=[INTER])) == "succeeded"
    assert Run.objects.get(id=run.id).result == [
        [i, "completed", {"i": i}, True] for i in range(N)
    ]
    assert sorted(RAN) == [(str(run.id), i) for i in range(N)]  # each once


@pytest.mark.parametrize("order", ["made", "reversed"])
def test_gathered_spawns_are_recorded_and_replayed_in_the_order_made(order: str) -> None:
    """Spawn i is record i and child i; the second attempt gets the same
    children back, each call its own, and makes none."""
    run = runqueue.submit(kind="order.spawns", payload={"order": order}).run
    _crash_after_the_handler(claimed(classes=[INTER]))
    records = list(ToolInvocation.objects.filter(run_id=run.id).order_by("seq"))
    children = Run.objects.in_bulk([uuid.UUID(r.result["run_id"]) for r in records])
    assert [children[uuid.UUID(r.result["run_id"])].payload for r in records] == [
        {"i": i} for i in range(N)
    ]
    assert testing.execute(claimed(classes=[INTER])) == "succeeded"
    ids = [uuid.UUID(i) for i in Run.objects.get(id=run.id).result]
    assert [Run.objects.get(id=i).payload for i in ids] == [{"i": i} for i in range(N)]
    assert Run.objects.filter(parent_id=run.id).count() == N


@pytest.mark.parametrize("order", ["made", "reversed"])
def test_gathered_schedules_are_recorded_and_replayed_in_the_order_made(order: str) -> None:
    """Schedule call i is record i and the schedule of payload i, whatever
    order the database threads ran the calls in; the second attempt gets
    the same schedules back, each call its own, and makes none."""
    run = runqueue.submit(kind="order.schedules", payload={"order": order}).run
    _crash_after_the_handler(claimed(classes=[INTER]))
    records = list(ToolInvocation.objects.filter(run_id=run.id).order_by("seq"))
    by_record = [name_of(uuid.UUID(r.result["schedule_id"])) for r in records]
    payloads = {s.name: s.payload for s in Schedule.objects.all()}
    assert [payloads[name] for name in by_record] == [{"i": i} for i in range(N)]
    assert testing.execute(claimed(classes=[INTER])) == "succeeded"
    ids = [uuid.UUID(i) for i in Run.objects.get(id=run.id).result]
    assert [payloads[name_of(i)] for i in ids] == [{"i": i} for i in range(N)]
    assert Schedule.objects.count() == N


# --- a replay that does not match its record ------------------------------------------


@runqueue.handler("order.spawn_as")
def spawn_as(ctx: runtime.RunContext) -> Any:
    """Spawns what the attempt's entry in payload["spawns"] says, then, on
    the first attempt, is lost."""
    spawns = ctx.payload["spawns"][min(ctx.attempt, len(ctx.payload["spawns"])) - 1]
    ids = [str(ctx.spawn(kind, payload)) for kind, payload in spawns]
    if ctx.attempt == 1:
        raise runqueue.TransientError("lost")
    return ids


@runqueue.handler("order.async_spawn_as")
async def async_spawn_as(ctx: runtime.AsyncRunContext) -> Any:
    spawns = ctx.payload["spawns"][min(ctx.attempt, len(ctx.payload["spawns"])) - 1]
    ids = [str(await ctx.spawn(kind, payload)) for kind, payload in spawns]
    if ctx.attempt == 1:
        raise runqueue.TransientError("lost")
    return ids


@runqueue.handler("order.tool_as")
def tool_as(ctx: runtime.RunContext) -> Any:
    args = ctx.payload["args"][min(ctx.attempt, len(ctx.payload["args"])) - 1]
    outcome = ctx.invoke_tool("echo", sync_echo, args=args)
    if ctx.attempt == 1:
        raise runqueue.TransientError("lost")
    return [outcome.status, outcome.value, outcome.replayed]


@runqueue.handler("order.async_tool_as")
async def async_tool_as(ctx: runtime.AsyncRunContext) -> Any:
    args = ctx.payload["args"][min(ctx.attempt, len(ctx.payload["args"])) - 1]
    outcome = await ctx.invoke_tool("echo", echo, args=args)
    if ctx.attempt == 1:
        raise runqueue.TransientError("lost")
    return [outcome.status, outcome.value, outcome.replayed]


def _two_attempts(kind: str, payload: dict) -> Run:
    run = runqueue.submit(kind=kind, payload=payload).run
    assert testing.execute(claimed(classes=[INTER])) == "requeued"
    testing.execute(claimed(classes=[INTER]))
    return Run.objects.get(id=run.id)


A = ["order.child", {"x": 1}]


@pytest.mark.parametrize("kind", ["order.spawn_as", "order.async_spawn_as"])
@pytest.mark.parametrize(
    ("again", "message"),
    [
        (
            ["test.echo", {"x": 1}],
            "tool call #0 was a spawn of 'order.child' on an earlier attempt and is a spawn of "
            "'test.echo' now: a handler must make its calls in the same order",
        ),
        (
            ["order.child", {"x": 2}],
            "tool call #0 was a spawn of 'order.child' with another payload on an earlier "
            "attempt: a handler must make its calls in the same order, with the same arguments",
        ),
    ],
)
def test_a_spawn_replayed_as_another_fails_the_run(fast_retry, kind, again, message) -> None:
    run = _two_attempts(kind, {"spawns": [[A], [again]]})
    assert run.status == RunStatus.FAILED
    assert run.failure["classification"] == "permanent"
    assert run.failure["error_type"] == "PermanentError"
    assert run.failure["message"] == message
    assert Run.objects.filter(parent_id=run.id).count() == 1  # no second child


@pytest.mark.parametrize("kind", ["order.spawn_as", "order.async_spawn_as"])
def test_the_same_spawn_replays_its_child(fast_retry, kind) -> None:
    """The payload's key order is no difference: the same JSON."""
    run = _two_attempts(kind, {"spawns": [[A], [["order.child", {"x": 1.0}]]]})
    assert run.status == RunStatus.SUCCEEDED
    (record,) = ToolInvocation.objects.filter(run_id=run.id)
    assert run.result == [record.result["run_id"]]
    assert record.arguments["payload_sha256"] == payload_digest({"x": 1})


@pytest.mark.parametrize("kind", ["order.spawn_as", "order.async_spawn_as"])
def test_a_spawn_recorded_before_payload_hashes_still_replays(fast_retry, kind) -> None:
    """A record written by earlier code has the kind and no payload hash:
    its kind is checked, its payload cannot be."""
    run = runqueue.submit(kind=kind, payload={"spawns": [[A], [["order.child", {"y": 1}]]]}).run
    assert testing.execute(claimed(classes=[INTER])) == "requeued"
    (record,) = ToolInvocation.objects.filter(run_id=run.id)
    record.arguments = {"kind": "order.child", "session_id": None}  # as 0012's code wrote it
    record.save(update_fields=["arguments"])
    assert testing.execute(claimed(classes=[INTER])) == "succeeded"
    assert Run.objects.get(id=run.id).result == [record.result["run_id"]]


@pytest.mark.parametrize("kind", ["order.tool_as", "order.async_tool_as"])
def test_a_tool_call_replayed_with_other_arguments_fails_the_run(fast_retry, kind) -> None:
    run = _two_attempts(kind, {"args": [{"run": "r", "i": 1}, {"run": "r", "i": 2}]})
    assert run.status == RunStatus.FAILED
    assert run.failure["error_type"] == "PermanentError"
    assert run.failure["message"] == (
        "tool call #0 was 'echo' with other arguments on an earlier attempt: a handler must "
        "make its calls in the same order, with the same arguments"
    )
    assert RAN == [("r", 1)]  # never run with the other arguments


@pytest.mark.parametrize("kind", ["order.tool_as", "order.async_tool_as"])
def test_a_tool_call_replayed_with_the_same_arguments_replays(fast_retry, kind) -> None:
    """The same JSON, whatever the key order or a tuple for a list; a
    record written before the check replays the same way (its arguments
    were always stored)."""
    run = _two_attempts(
        kind, {"args": [{"run": "r", "i": 1, "n": [1, 2]}, {"n": [1, 2.0], "i": 1, "run": "r"}]}
    )
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == ["completed", {"i": 1}, True]
    assert RAN == [("r", 1)]


@runqueue.handler("order.checkpoint_among_calls")
async def checkpoint_among_calls(ctx: runtime.AsyncRunContext) -> Any:
    calls = [ctx.invoke_tool("echo", echo, args={"run": "c", "i": i}) for i in range(3)]
    await ctx.checkpoint({"after": 3})  # made after the calls, awaited before them
    await asyncio.gather(*calls)
    return "done"


def test_a_checkpoint_counts_the_calls_made_before_it_not_those_recorded() -> None:
    """Resuming from it numbers the next call 3: the calls made before it
    count, whenever they are awaited."""
    from runqueue.models import Checkpoint

    run = runqueue.submit(kind="order.checkpoint_among_calls").run
    assert testing.execute(claimed(classes=[INTER])) == "succeeded"
    assert Checkpoint.objects.get(run_id=run.id).tool_seq == 3
