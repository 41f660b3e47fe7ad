"""The OpenAI Agents SDK on runqueue: ``Runner.run`` / ``run_sync`` /
``run_streamed`` for a handler, so an unchanged ``agents.Agent`` runs
durably.

Inside these calls every model request is one step of the run
(``runqueue.contrib.steps.model_request``) and every function tool call one
``ctx.invoke_tool``; a retry after a crash or a lost lease re-runs the
handler, and the SDK's loop meets each finished request and tool call again
as a replayed record: nothing finished is sent or run twice.

How: while a durable run is active (a context variable, so nested runs and
the SDK's own tasks inherit it and nothing else sees it), three of the SDK's
internal seams are wrapped: the model it resolves for an agent (a
``Model`` instance or a name through ``RunConfig.model_provider`` alike),
the invocation of a function tool (``@function_tool``, MCP tools, tools of
an agent used as a tool), and its ``needs_approval`` evaluation (mapped onto
runqueue's approvals, so the SDK never interrupts the run itself). The
agent, its tools and handoffs are the caller's objects, untouched. The
seams are private to the SDK: the extra pins the minor version
(``openai-agents>=0.24,<0.25``) and ``install`` refuses a version without
them.

The package by concern: the runner a handler calls (``runner``), the model
that records each request (``model``, its record in ``requests``), function
tools and approvals (``tools``), the run's session as the conversation
(``sessions``), steering messages (``steering``), the SDK's seams
(``seams``), and the durable run they share (``durable``).
"""

try:
    import agents  # noqa: F401 - first, for the message below
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "runqueue.contrib.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'django-runqueue[openai-agents]'"
    ) from exc

from runqueue.contrib.openai_agents.durable import idempotency_key, idempotent_tool
from runqueue.contrib.openai_agents.requests import (  # noqa: F401 - a scripted model's too
    completed_event as _completed_event,
)
from runqueue.contrib.openai_agents.runner import Runner
from runqueue.contrib.openai_agents.seams import install
from runqueue.contrib.openai_agents.sessions import SESSION_STEP, RunqueueSession
from runqueue.contrib.openai_agents.tools import ToolErrorOutput as ToolErrorOutput
from runqueue.contrib.openai_agents.tools import ToolFailed as ToolFailed

__all__ = [
    "SESSION_STEP",
    "RunqueueSession",
    "Runner",
    "idempotency_key",
    "idempotent_tool",
    "install",
]
