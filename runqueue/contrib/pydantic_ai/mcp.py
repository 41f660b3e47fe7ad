"""An MCP call's idempotency key, sent in its request ``_meta``
(``MCP_META_KEY``) while the call runs as a runqueue step, so a server that
supports it can deduplicate a call a later attempt makes again."""

from __future__ import annotations

import contextvars
from typing import Any

from pydantic_ai.tools import RunContext as AgentRunContext
from pydantic_ai.toolsets import AbstractToolset

#: The key of the idempotency key in an MCP call's request ``_meta``.
MCP_META_KEY = "idempotency_key"

#: The idempotency key of the MCP call running now (read by the ``_meta`` hook).
mcp_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runqueue_pydantic_ai_mcp_key", default=None
)


def send_idempotency_keys(toolset: AbstractToolset[Any]) -> None:
    """Have an MCP toolset send each call's idempotency key in its request
    ``_meta`` (``MCP_META_KEY``) while it runs as a runqueue step, through
    its ``process_tool_call`` hook (the one it had is kept, inside).
    Outside a step the hook passes calls through unchanged."""
    try:
        from pydantic_ai.mcp import MCPToolset
    except ImportError:  # the [mcp] extra is not installed: no MCP toolsets
        return
    if not isinstance(toolset, MCPToolset) or getattr(
        toolset.process_tool_call, "_runqueue", False
    ):
        return
    inner = toolset.process_tool_call

    async def process_tool_call(
        run_ctx: AgentRunContext[Any],
        call_tool: Any,
        name: str,
        args: dict[str, Any],
    ) -> Any:
        key = mcp_key.get()
        if key is not None:
            plain = call_tool

            async def call_tool(
                name: str, args: dict[str, Any], *, metadata: dict[str, Any] | None = None
            ) -> Any:
                return await plain(name, args, metadata={**(metadata or {}), MCP_META_KEY: key})

        if inner is not None:
            return await inner(run_ctx, call_tool, name, args)
        return await call_tool(name, args)

    process_tool_call._runqueue = True  # type: ignore[attr-defined]
    toolset.process_tool_call = process_tool_call
