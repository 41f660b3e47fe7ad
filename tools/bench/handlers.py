"""The benchmark's runqueue handlers (imported by bench workers through
RUNQUEUE_HANDLER_MODULES=tools.bench.handlers)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import runqueue

#: Set by an in-process benchmark: called with the payload at handler start.
on_start: Callable[[Any], None] | None = None


@runqueue.handler("bench.noop")
def noop(ctx: runqueue.RunContext) -> None:
    """Does nothing: the queue's own cost per run."""
    if on_start is not None:
        on_start(ctx.payload)


#: A FIFO the ``bench.stamp`` handler writes its start time to (``tools.bench.pooler``).
STAMP_FIFO_ENV = "BENCH_STAMP_FIFO"


@runqueue.handler("bench.stamp")
def stamp(ctx: runqueue.RunContext) -> None:
    """Reports ``payload.seq`` and the moment it started (CLOCK_MONOTONIC, the
    same clock in every process of the machine) to the bench through the FIFO
    named by ``BENCH_STAMP_FIFO``: a worker in another process's pickup."""
    at = time.clock_gettime(time.CLOCK_MONOTONIC)
    fifo = os.environ.get(STAMP_FIFO_ENV)
    if fifo:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, f"{ctx.payload['seq']} {at!r}\n".encode())
        finally:
            os.close(fd)


@runqueue.handler("bench.busy")
def busy(ctx: runqueue.RunContext) -> None:
    """Keeps its slot busy for ``payload.sleep`` seconds (10 ms by default)."""
    time.sleep(ctx.payload.get("sleep", 0.01) if isinstance(ctx.payload, dict) else 0.01)


#: Set by an in-process benchmark to end every ``bench.hold`` run at once.
release = threading.Event()


@runqueue.handler("bench.hold")
def hold(ctx: runqueue.RunContext) -> None:
    """A long interactive turn: holds its slot until ``release`` is set (or
    ``payload.seconds``, 600 by default, pass)."""
    seconds = ctx.payload.get("seconds", 600) if isinstance(ctx.payload, dict) else 600
    release.wait(seconds)


def _seconds(ctx: Any, default: float) -> float:
    return ctx.payload.get("seconds", default) if isinstance(ctx.payload, dict) else default


@runqueue.handler("bench.turn_async")
async def turn_async(ctx: Any) -> None:
    """An agent turn: awaits a fake model call (``payload.seconds``, 2 s)."""
    import asyncio

    await asyncio.sleep(_seconds(ctx, 2.0))


@runqueue.handler("bench.turn_sync")
def turn_sync(ctx: runqueue.RunContext) -> None:
    """The same turn on a thread: blocks for the fake model call."""
    time.sleep(_seconds(ctx, 2.0))


#: Set by an in-process benchmark: called with the payload when the handler
#: learns it was cancelled, and when it has returned (``finally``).
on_cancelled: Callable[[Any], None] | None = None
on_returned: Callable[[Any], None] | None = None


@runqueue.handler("bench.cancel_async")
async def cancel_async(ctx: Any) -> None:
    """Awaits until cancelled; reports the CancelledError's arrival."""
    import asyncio

    if on_start is not None:
        on_start(ctx.payload)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        if on_cancelled is not None:
            on_cancelled(ctx.payload)
        raise
    finally:
        if on_returned is not None:
            on_returned(ctx.payload)


@runqueue.handler("bench.cancel_sync")
def cancel_sync(ctx: runqueue.RunContext) -> None:
    """Waits on ctx.cancelled; reports when it is set."""
    if on_start is not None:
        on_start(ctx.payload)
    try:
        if ctx.cancelled.wait(60) and on_cancelled is not None:
            on_cancelled(ctx.payload)
    finally:
        if on_returned is not None:
            on_returned(ctx.payload)


def stream_deltas(seed: int, count: int) -> list[str]:
    """A model's tokens: short words, accents, emoji, a newline now and then."""
    import random

    rng = random.Random(seed)
    words = ["the", " queue", " é", " run", " 🙂", " lease", "\n", " naïve", " token", ","]
    return [rng.choice(words) for _ in range(count)]


@runqueue.handler("bench.stream")
def stream(ctx: runqueue.RunContext) -> dict:
    """Streams ``payload.deltas`` deltas as fast as it can; returns the text."""
    deltas = stream_deltas(ctx.payload["seed"], ctx.payload["deltas"])
    for delta in deltas:
        if not ctx.stream(delta):
            return {"fenced": True}
    return {"text": "".join(deltas)}


@runqueue.handler("bench.wait_signal")
def wait_signal(ctx: runqueue.RunContext) -> Any:
    """Waits for signal "go"; on resume calls ``on_start`` (resume latency)."""
    if ctx.state is None:
        return ctx.wait_for_signal("go", state={"waited": True})
    if on_start is not None:
        on_start(ctx.payload)
    return None


#: ``bench.budget_call``'s record: one JSON line per call and pause, a file
#: per process, in the folder ``common.BUDGET_LOG_ENV`` names.
_budget_log: Any = None
_budget_log_lock = threading.Lock()


def _record(**fields: Any) -> None:
    """One line of the soak's log, written and flushed at once (a line is
    never half there when the soak reads the file after the workers exit)."""
    global _budget_log
    import json
    import os

    with _budget_log_lock:
        if _budget_log is None:
            from tools.bench.common import BUDGET_LOG_ENV

            folder = os.environ[BUDGET_LOG_ENV]
            _budget_log = open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a")  # noqa: SIM115
        _budget_log.write(json.dumps(fields) + "\n")
        _budget_log.flush()


@runqueue.handler("bench.budget_call")
def budget_call(ctx: runqueue.RunContext) -> Any:
    """An agent turn of ``payload.calls`` model calls on budget
    ``payload.key`` against a fake provider (a sleep): the claim reserved the
    first call (declared at submit, or by ``wait_for_budget``); each call
    settles a random used count (``payload.over`` of them past the
    estimate); a further call is reserved with ``ctx.reserve``, or the run
    waits for it; a fake 429 (``payload.p429`` of the calls, Retry-After
    1-3 s) pauses the key and the run waits to call again. Every call and
    pause is recorded (``common.BUDGET_LOG_ENV``) for the soak to check."""
    import random

    p = ctx.payload
    assert isinstance(p, dict)  # noqa: S101 - the soak submits it
    key, estimate, tenant = p["key"], p["tokens"], ctx.run.tenant
    done = (ctx.state or {}).get("done", 0) if isinstance(ctx.state, dict) else 0
    run, epoch = str(ctx.run.id), ctx.run.lease_epoch
    reserved_at: float | None = None  # None: the claim's reservation
    holding = True
    while done < p["calls"]:
        if not holding:
            reserved_at = time.time()
            if not ctx.reserve(key, estimate):
                return ctx.wait_for_budget(key, estimate, state={"done": done})
        called = time.time()
        time.sleep(random.uniform(*p["sleep"]))
        if random.random() < p["p429"]:
            until = runqueue.pause_budget(key, random.uniform(1.0, 3.0))
            _record(e="pause", key=key, set=time.time(), until=until.timestamp())
            ctx.settle(tokens=0)
            _record(
                e="call",
                run=run,
                epoch=epoch,
                tenant=tenant,
                key=key,
                at=called,
                reserved=reserved_at,
                status=429,
                used=0,
                estimate=estimate,
            )
            return ctx.wait_for_budget(key, estimate, state={"done": done})
        high = 1.3 if random.random() < p["over"] else 1.0
        used = int(estimate * random.uniform(0.4, high))
        ctx.settle(tokens=used)
        _record(
            e="call",
            run=run,
            epoch=epoch,
            tenant=tenant,
            key=key,
            at=called,
            reserved=reserved_at,
            status=200,
            used=used,
            estimate=estimate,
        )
        done += 1
        holding = False
    return {"calls": done}
