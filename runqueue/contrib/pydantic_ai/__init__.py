"""Run an unchanged ``pydantic_ai.Agent`` durably inside a runqueue handler.

::

    durable = RunqueueAgent(agent, idempotent={"lookup_order"})

    @runqueue.handler("support.turn")
    def turn(ctx):
        return durable.run_sync(ctx.payload["prompt"], ctx=ctx).output

Built on Pydantic AI's own extension point for durable engines
(``pydantic_ai.durable_exec``): ``RunqueueDurability`` is a
``BaseDurabilityCapability`` attached to each run (the agent is not
changed), and its ``CallableOperationBackend`` receives every model
request and tool call as one named unit with a body to run. Each model
request becomes one ``steps.model_request`` step (its record holds the
SDK's own serialized ``ModelResponse``, which a replay gives back); each
tool call one ``ctx.invoke_tool`` step (its record holds the SDK's own
encoding of the call's result, control flow such as ``ModelRetry``
included). Everything else the framework routes there (tool discovery,
argument validation, events) is deterministic and runs in place,
unrecorded, so the run's record is exactly its model requests and tool
calls, in order. Tool calls run one at a time, so their numbers never
depend on scheduling.

A retry of the run re-runs the handler: every finished model response
and tool result is replayed from the record, nothing finished is sent or
run again, and a non-idempotent tool its worker died in comes back
``uncertain``, which the model is told as the tool's return.

The package by concern: the wrapper a handler calls (``agent``), the
durability capability and its backend (``durability``), model requests
(``model_requests``), tool calls and approvals (``tools``), an MCP call's
idempotency key (``mcp``).
"""

from runqueue.contrib.pydantic_ai.agent import RunqueueAgent
from runqueue.contrib.pydantic_ai.durability import RunqueueDurability
from runqueue.contrib.pydantic_ai.mcp import MCP_META_KEY
from runqueue.contrib.pydantic_ai.model_requests import model_request as model_request
from runqueue.contrib.pydantic_ai.tools import METADATA_KEY, tool_metadata

__all__ = ["METADATA_KEY", "MCP_META_KEY", "RunqueueAgent", "RunqueueDurability", "tool_metadata"]
