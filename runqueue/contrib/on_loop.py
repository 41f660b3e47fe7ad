"""An agent runs on runqueue's event loop (``runqueue.runtime.aio``) whichever kind
of handler called it: the async face of the handler's context
(``as_async``), and a sync handler's thread waiting for the agent, which a
cancelled run cancels (``wait_for``). What every adapter does the same way,
whatever its SDK."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Awaitable

from runqueue.runtime import aio
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext

#: How often a sync handler waiting for its agent looks at ``ctx.cancelled``.
WAKE_SECONDS = 0.2


def as_async(ctx: RunContext | AsyncRunContext) -> AsyncRunContext:
    """The async face of a handler's context: an adapter runs the agent on
    the loop whichever kind of handler called it."""
    return ctx if isinstance(ctx, AsyncRunContext) else AsyncRunContext(ctx)


def wait_for[T](ctx: RunContext, agent_run: Awaitable[T], *, instead: str) -> T:
    """Run ``agent_run`` on runqueue's loop and wait for it on the sync
    handler's thread; a cancelled run cancels it (RunCancelled). On the
    loop itself, where waiting would block the loop, RuntimeError: that code
    awaits ``instead``."""
    if aio.loop() is _running_loop():
        if inspect.iscoroutine(agent_run):
            agent_run.close()  # never started: no "never awaited" warning
        raise RuntimeError(f"run_sync cannot wait on runqueue's own loop: await {instead}")

    async def wrapped() -> T:
        return await agent_run

    future = aio.run(wrapped())
    finished = threading.Event()
    future.add_done_callback(lambda _: finished.set())
    while not finished.wait(WAKE_SECONDS):
        if ctx.cancelled.is_set():
            future.cancel()
            break
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        ctx.check()
        raise


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
