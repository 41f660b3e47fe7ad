"""The chaos runner's handlers: an agent turn with checkpoints, an idempotent
and a non-idempotent tool per step, and sometimes a question for the user;
the same turn as an ``async def`` handler with async tools."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from demo import payload as fields
from runqueue import Idempotency, RunContext
from runqueue.registry import handler
from tools.chaos import ledger

KIND = "chaos.turn"
KIND_ASYNC = "chaos.turn_async"
#: What a payload may ask for, whoever submitted it: a turn of at most
#: MAX_STEPS steps of at most MAX_WORK_MS per tool call.
MAX_WORK_MS = 2000
MAX_STEPS = 8


def _tool(name: str, idempotency: str):  # noqa: ANN202 - a tool function
    def tool(run_id: str, work_ms: int, idempotency_key: str) -> dict:
        time.sleep(work_ms / 1000)  # simulated work, the window faults land in
        ledger.record(run_id, name, idempotency, idempotency_key)
        return {"key": idempotency_key}

    return tool


fetch = _tool("fetch", Idempotency.IDEMPOTENT)
pay = _tool("pay", Idempotency.NON_IDEMPOTENT)


def _async_tool(name: str, idempotency: str):  # noqa: ANN202 - a tool function
    async def tool(run_id: str, work_ms: int, idempotency_key: str) -> dict:
        await asyncio.sleep(work_ms / 1000)  # the window faults and cancels land in
        await asyncio.to_thread(ledger.record, run_id, name, idempotency, idempotency_key)
        return {"key": idempotency_key}

    return tool


async_fetch = _async_tool("fetch", Idempotency.IDEMPOTENT)
async_pay = _async_tool("pay", Idempotency.NON_IDEMPOTENT)


def _arguments(kind: str, ctx: Any) -> tuple[bool, dict[str, Any], int, bool]:
    """The turn's payload checked whole (PermanentError naming a bad field):
    whether to ask first, the tools' arguments, how many steps, and whether
    to stream text (``ctx.stream``) as it goes. A turn double texts were
    merged into (``on_busy="merge"``) does what the last one asks."""
    payload = fields.fields(
        kind, ctx.payloads[-1], ("ask", "work_ms", "steps", "answer", "stream")
    )
    work_ms = fields.integer(payload, "work_ms", 100, 0, MAX_WORK_MS)
    args = {"run_id": str(ctx.run.id), "work_ms": work_ms}
    steps = fields.integer(payload, "steps", 2, 0, MAX_STEPS)
    return fields.flag(payload, "ask"), args, steps, fields.flag(payload, "stream")


def _words(step: int, statuses: list[str]) -> list[str]:
    """A step's streamed text, a delta per word."""
    return [f"step {step}:", *(f" {s}" for s in statuses), " ✓\n"]


def _result(state: dict, statuses: list[str], answer: Any, text: list[str] | None) -> Any:
    out = {"steps": state["step"], "tools": statuses, "answer": answer}
    return out if text is None else out | {"text": "".join(text)}


def _used(ctx: Any) -> int | None:
    """The model call this turn's claim reserved, as a fake provider would
    bill it: at most what was reserved (None: nothing reserved)."""
    if not ctx.lease.reservations:
        return None
    return random.randint(0, ctx.lease.reservations[0].tokens)  # noqa: S311 - a fake bill


@handler(KIND)
def turn(ctx: RunContext) -> Any:
    ask, args, steps, stream = _arguments(KIND, ctx)
    text: list[str] | None = [] if stream else None
    if (used := _used(ctx)) is not None and ctx.settle(tokens=used) is None:
        return None  # fenced
    state = ctx.state or {"step": 0}
    if ask and ctx.input is None:
        return ctx.ask_user({"question": "go on?"}, state)
    statuses = []
    while state["step"] < steps:
        for name, fn, idem in (
            ("fetch", fetch, Idempotency.IDEMPOTENT),
            ("pay", pay, Idempotency.NON_IDEMPOTENT),
        ):
            outcome = ctx.invoke_tool(name, fn, args=args, idempotency=idem)
            if outcome.status == "fenced":
                return None  # another worker owns the run: stop here
            statuses.append(outcome.status)
        state = {"step": state["step"] + 1}
        for word in _words(state["step"], statuses) if text is not None else ():
            if not ctx.stream(word):
                return None
            text.append(word)  # type: ignore[union-attr]
        if not ctx.checkpoint(state):
            return None
    return _result(state, statuses, ctx.input, text)


@handler(KIND_ASYNC)
async def turn_async(ctx: Any) -> Any:
    """``turn`` as an async handler (``runqueue.runtime.AsyncRunContext``)."""
    ask, args, steps, stream = _arguments(KIND_ASYNC, ctx)
    text: list[str] | None = [] if stream else None
    if (used := _used(ctx)) is not None and await ctx.settle(tokens=used) is None:
        return None  # fenced
    state = ctx.state or {"step": 0}
    if ask and ctx.input is None:
        return ctx.ask_user({"question": "go on?"}, state)
    statuses = []
    while state["step"] < steps:
        for name, fn, idem in (
            ("fetch", async_fetch, Idempotency.IDEMPOTENT),
            ("pay", async_pay, Idempotency.NON_IDEMPOTENT),
        ):
            outcome = await ctx.invoke_tool(name, fn, args=args, idempotency=idem)
            if outcome.status == "fenced":
                return None
            statuses.append(outcome.status)
        state = {"step": state["step"] + 1}
        for word in _words(state["step"], statuses) if text is not None else ():
            if not await ctx.stream(word):
                return None
            text.append(word)  # type: ignore[union-attr]
        if not await ctx.checkpoint(state):
            return None
    return _result(state, statuses, ctx.input, text)


# --- sub-agents: fan-out and fan-in, signals, trees ------------------------------

KIND_FANOUT = "chaos.fanout"
KIND_SIGNAL = "chaos.signal"
KIND_TREE = "chaos.tree"
KIND_LEAF = "chaos.leaf"
#: A fan-out's children at most, whoever submitted it.
MAX_CHILDREN = 1000
#: The signal the soak sends its signal runs.
SIGNAL = "go"


@handler(KIND_LEAF)
def leaf(ctx: RunContext) -> Any:
    """A child: a little work, so kills and cancels land while it runs."""
    payload = fields.fields(KIND_LEAF, ctx.payload, ("i", "work_ms", "depth", "width"))
    time.sleep(fields.integer(payload, "work_ms", 50, 0, MAX_WORK_MS) / 1000)
    return {"i": payload.get("i")}


@handler(KIND_FANOUT)
def fanout(ctx: RunContext) -> Any:
    """Spawns its children, waits for them all, and on resume reports them."""
    payload = fields.fields(KIND_FANOUT, ctx.payload, ("children", "work_ms"))
    n = fields.integer(payload, "children", 4, 0, MAX_CHILDREN)
    work_ms = fields.integer(payload, "work_ms", 50, 0, MAX_WORK_MS)
    if ctx.state is None:
        for i in range(n):
            ctx.spawn(KIND_LEAF, {"i": i, "work_ms": work_ms})
        return ctx.wait_for_children(state={"joined": True})
    statuses = [c.status for c in ctx.children()]
    return {"children": len(statuses), "succeeded": statuses.count("succeeded")}


@handler(KIND_SIGNAL)
def wait_signal(ctx: RunContext) -> Any:
    """Waits for the soak's signal (a long timeout: a lost signal shows as
    a run still waiting at the end, or timed out)."""
    if ctx.state is None:
        return ctx.wait_for_signal(SIGNAL, timeout=3600, state={"waited": True})
    return {"input": ctx.input, "timed_out": ctx.timed_out}


@handler(KIND_TREE)
def tree(ctx: RunContext) -> Any:
    """A level of a tree the soak cancels while it runs: spawns ``width``
    children a level down, leaves work a while."""
    payload = fields.fields(KIND_TREE, ctx.payload, ("depth", "width"))
    depth = fields.integer(payload, "depth", 2, 0, 4)
    width = fields.integer(payload, "width", 3, 0, 10)
    if depth == 0:
        for _ in range(20):
            if ctx.cancelled.wait(0.1):
                ctx.check()
        return {"leaf": True}
    if ctx.state is None:
        for _ in range(width):
            ctx.spawn(KIND_TREE, {"depth": depth - 1, "width": width})
        return ctx.wait_for_children(state={"joined": True})
    return {"children": len(ctx.children())}


# --- gathered calls, an operator's requeue ------------------------------------------

KIND_GATHER = "chaos.gather"
#: The failure a gather run dead-letters with once, for the soak's operator
#: to requeue (``ChaosRun.requeue_dead_parents``).
FAIL_ONCE = "chaos: dead-lettered once, for an operator to requeue"


async def _echo(i: int) -> dict:
    await asyncio.sleep(0)
    return {"i": i}


def _requeued(run_id: Any) -> bool:
    from runqueue.models import EventLog

    return EventLog.objects.filter(run_id=run_id, type="run.operator_requeued").exists()


@handler(KIND_GATHER)
async def gather(ctx: Any) -> Any:
    """An async parent whose spawns and tool calls are gathered (made at
    once): each call must get its own record back when a killed attempt is
    replayed (``replay_mismatches``). With ``fail_once`` it dead-letters
    after spawning, until an operator requeued it: the requeued parent
    replays its spawns and must still resume once its children end."""
    from runqueue.errors import PermanentError
    from runqueue.runtime import aio

    payload = fields.fields(KIND_GATHER, ctx.payload, ("children", "work_ms", "fail_once"))
    n = fields.integer(payload, "children", 3, 0, 20)
    work_ms = fields.integer(payload, "work_ms", 50, 0, MAX_WORK_MS)
    if ctx.state is None:
        ids = await asyncio.gather(
            *(ctx.spawn(KIND_LEAF, {"i": i, "work_ms": work_ms}) for i in range(n))
        )
        outs = await asyncio.gather(
            *(
                ctx.invoke_tool("echo", _echo, args={"i": i}, idempotency=Idempotency.IDEMPOTENT)
                for i in range(n)
            )
        )
        wrong = [i for i, o in enumerate(outs) if o.status == "completed" and o.value != {"i": i}]
        if fields.flag(payload, "fail_once") and not await aio.db(_requeued, ctx.run.id):
            raise PermanentError(FAIL_ONCE)
        state = {"ids": [str(i) for i in ids], "wrong": wrong}
        return ctx.wait_for_children(state=state)
    children = await ctx.children()
    wrong = list(ctx.state["wrong"])
    for i, child in enumerate(children):
        if str(child.id) != ctx.state["ids"][i] or child.payload.get("i") != i:
            wrong.append(i)
    return {"children": len(children), "replay_mismatches": len(wrong)}
