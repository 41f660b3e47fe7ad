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
