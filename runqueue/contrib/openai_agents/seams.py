"""The three SDK seams the adapter wraps while a durable run is active:
where it resolves an agent's model (``DurableModel``), invokes a function
tool (``durable_tool``) and evaluates ``needs_approval`` (runqueue decides:
never the SDK). Private to the SDK: ``install`` refuses a version without
them."""

from __future__ import annotations

import threading
from typing import Any

import agents

from runqueue.contrib.openai_agents.durable import ACTIVE
from runqueue.contrib.openai_agents.model import DurableModel
from runqueue.contrib.openai_agents.tools import durable_tool

_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Wrap the SDK's seams once (idempotent; inert outside a durable run).
    ImportError if this SDK version does not have them."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from agents.run_internal import run_loop, tool_execution

        try:
            get_model = run_loop.get_model
            invoke = tool_execution._invoke_function_tool_with_metadata
            evaluate = tool_execution.evaluate_function_tool_approval
            from agents._function_tool_arguments import FunctionToolApproval
        except AttributeError as exc:
            raise ImportError(
                f"openai-agents {agents.__version__} is not supported by "
                "runqueue.contrib.openai_agents (it needs >=0.24,<0.25)"
            ) from exc

        def durable_get_model(agent: Any, run_config: Any) -> Any:
            model = get_model(agent, run_config)
            if ACTIVE.get() is None or isinstance(model, DurableModel):
                return model
            return DurableModel(model)

        async def durable_invoke(*, function_tool: Any, context: Any, arguments: str) -> Any:
            durable = ACTIVE.get()
            if durable is None:
                return await invoke(
                    function_tool=function_tool, context=context, arguments=arguments
                )
            return await durable_tool(durable, invoke, function_tool, context, arguments)

        async def durable_evaluate(
            function_tool: Any, context: Any, arguments: str, call_id: str, **kwargs: Any
        ) -> Any:
            if ACTIVE.get() is None:
                return await evaluate(function_tool, context, arguments, call_id, **kwargs)
            # runqueue decides approvals (ctx.invoke_tool(approval=...)): never the SDK.
            return FunctionToolApproval(
                "invoke", function_tool, function_tool.on_invoke_tool, arguments
            )

        run_loop.get_model = durable_get_model
        tool_execution._invoke_function_tool_with_metadata = durable_invoke
        tool_execution.evaluate_function_tool_approval = durable_evaluate
        _installed = True
