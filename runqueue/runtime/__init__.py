"""The handler runtime: the RunContext a handler gets, and running a lease.

A handler is ``fn(ctx) -> result``, or ``async def fn(ctx)`` (run on the
process's event loop, ``runqueue.runtime.aio``, with ``AsyncRunContext``: the same
calls, awaited). It resumes from its last checkpoint
(``ctx.state``); tool invocations recorded by an earlier attempt are replayed
from their records instead of running again, and the one left ``started`` is
decided by its idempotency class: an idempotent tool runs again, a
non-idempotent one becomes ``uncertain`` and the handler is told so.
Once the lease is lost, nothing more is written or run for this attempt.

Cancellation reaches the handler: when the run is cancelled (a NOTIFY tells
the worker at once), its lease is found fenced, or the worker is stopping,
``ctx.cancelled`` (a ``threading.Event``) is set, every ctx call after it
raises ``RunCancelled``, and an async handler gets ``CancelledError`` at
its current ``await``. The fence still decides what may be written.

A package by concern (the contexts, the tool calls, the values a handler
returns, running a lease); every public name is re-exported here.
"""

from runqueue.leases.outcomes import ToolOutcome
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.runtime.interrupted import FinishedTool, Interrupted, interrupted_of
from runqueue.runtime.returns import AskUser, Wait
from runqueue.runtime.running import (
    _returned,
    build_context,
    decide,
    decide_async,
    max_duration,
)
from runqueue.runtime.tools import (
    PATCH_NAME_MAX_LENGTH,
    PATCH_TOOL,
    patch_name_problem,
    respawned,
    same_tool_call,
)

__all__ = [
    "PATCH_NAME_MAX_LENGTH",
    "PATCH_TOOL",
    "AskUser",
    "AsyncRunContext",
    "FinishedTool",
    "Interrupted",
    "RunContext",
    "ToolOutcome",
    "Wait",
    "_returned",
    "build_context",
    "decide",
    "decide_async",
    "interrupted_of",
    "max_duration",
    "patch_name_problem",
    "respawned",
    "same_tool_call",
]
