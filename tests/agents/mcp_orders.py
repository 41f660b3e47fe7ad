"""A local MCP server over stdio (the ``mcp`` package's server, FastMCP's
successor) for the adapter's tests: one read-only tool, one write. Each call
appends its tool, arguments and request ``_meta`` to the file named by its
first argument, so the tests count calls across processes."""

from __future__ import annotations

import json
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("orders")


def _log(tool: str, args: dict[str, Any], ctx: Context) -> None:
    meta = ctx.request_context.meta
    meta = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta or {})
    with open(sys.argv[1], "a") as log:
        log.write(json.dumps({"tool": tool, "args": args, "meta": meta}, default=str) + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def find_order(order: int, ctx: Context) -> dict:
    """Find an order."""
    _log("find_order", {"order": order}, ctx)
    return {"id": order, "total": 40}


@server.tool()
def cancel_order(order: int, ctx: Context) -> str:
    """Cancel an order: a write."""
    _log("cancel_order", {"order": order}, ctx)
    return f"cancelled {order}"


if __name__ == "__main__":
    server.run("stdio")
