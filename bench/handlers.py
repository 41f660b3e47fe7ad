"""The benchmark's runqueue handlers (imported by bench workers through
RUNQUEUE_HANDLER_MODULES=bench.handlers)."""

from __future__ import annotations

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
