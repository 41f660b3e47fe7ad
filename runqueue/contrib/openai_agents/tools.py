"""Function tools (``@function_tool``, MCP tools, an agent used as a tool)
under a durable run: each call one ``ctx.invoke_tool`` step, its
``needs_approval`` runqueue's approval, and its recorded outcome what the
model reads (``durable_tool``); an agent used as a tool is no step itself,
its own requests and calls are."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents.items import ItemHelpers
from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE, FunctionTool

from runqueue.contrib.openai_agents.durable import ACTIVE, IDEMPOTENT_MARK, KEY, Durable, jsonable
from runqueue.contrib.steps import fenced
from runqueue.leases.outcomes import ToolOutcome
from runqueue.models import Idempotency
from runqueue.runtime import AsyncRunContext
from runqueue.types import JSON

#: What the model reads for a call whose worker died while it ran.
UNCERTAIN_OUTPUT = (
    "The outcome of this {tool} call is unknown: it was interrupted ({reason}) and may or may "
    "not have happened. Do not assume that it failed; check before trying it again."
)


class ToolErrorOutput(Exception):  # noqa: N818 - what the model read, recorded as the failure
    """A tool failed and the SDK turned the failure into the text the model
    reads (its ``failure_error_function``): recorded as the call's failure,
    replayed as that text."""


def _arguments(arguments: str) -> dict[str, JSON]:
    """The model's arguments as the step's arguments (a JSON object); text
    that is not one is kept whole, for the tool to refuse as it would."""
    try:
        parsed = json.loads(arguments) if arguments and arguments.strip() else {}
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_arguments": arguments}


def _argument_text(args: dict[str, JSON]) -> str:
    if set(args) == {"_arguments"} and isinstance(args["_arguments"], str):
        return args["_arguments"]
    return json.dumps(args)


def _recordable(output: Any) -> JSON:
    """A tool's output as recorded and as the SDK is handed it, live and on
    replay alike: itself when it is JSON, else what the model would read."""
    try:
        if json.loads(json.dumps(output)) == output:
            recorded: JSON = output
            return recorded
    except (TypeError, ValueError):
        pass
    return jsonable(ItemHelpers._convert_tool_output(output))


async def _needs_approval(tool: FunctionTool, context: Any, args: dict[str, JSON]) -> bool:
    setting = tool.needs_approval
    if isinstance(setting, bool):
        return setting
    decided: Any = setting(context, args, getattr(context, "tool_call_id", ""))
    if isinstance(decided, Awaitable):
        decided = await decided
    return bool(decided)


async def durable_tool(
    durable: Durable,
    invoke: Callable[..., Awaitable[Any]],
    tool: FunctionTool,
    context: Any,
    arguments: str,
) -> Any:
    """One function tool call as ``ctx.invoke_tool``; the SDK's invocation
    result (its output, and whether the SDK made it from a failure)."""
    from agents.tool import _FunctionToolInvocationResult

    if getattr(tool, "_is_agent_tool", False):
        # An agent used as a tool: its own model requests and tool calls are
        # the run's steps (a crash in the middle replays the finished ones),
        # so the call itself is not one. Its text is not the run's stream.
        if await _needs_approval(tool, context, _arguments(arguments)):
            # The person's decision is a step of its own, before the agent runs.
            gate: ToolOutcome = await durable.ctx.invoke_tool(
                tool.name,
                _approved,
                args=_arguments(arguments),
                idempotency=Idempotency.IDEMPOTENT,
                approval=True,
            )
            if gate.status != "completed":
                return _FunctionToolInvocationResult(*_tool_output(durable.ctx, tool.name, gate))
            value = gate.value
            if not (isinstance(value, dict) and set(value) == {"approved"}):
                return _FunctionToolInvocationResult(value)  # a person's response stands for it
            approved = value["approved"]
            arguments = _argument_text(approved if isinstance(approved, dict) else {})
        token = ACTIVE.set(dataclasses.replace(durable, stream=False))
        try:
            return await invoke(function_tool=tool, context=context, arguments=arguments)
        finally:
            ACTIVE.reset(token)

    args = _arguments(arguments)
    idempotency = (
        Idempotency.IDEMPOTENT
        if tool.name in durable.idempotent or getattr(tool, IDEMPOTENT_MARK, False)
        else Idempotency.NON_IDEMPOTENT
    )
    options: dict[str, Any] = {}
    if await _needs_approval(tool, context, args):
        options["approval"] = True

    async def call(idempotency_key: str, **call_args: JSON) -> JSON:
        token = KEY.set(idempotency_key)
        try:
            result = await invoke(
                function_tool=tool, context=context, arguments=_argument_text(call_args)
            )
        finally:
            KEY.reset(token)
        output = _recordable(result.output)
        if result.is_sdk_generated_error:
            raise ToolErrorOutput(output if isinstance(output, str) else json.dumps(output))
        return output

    outcome: ToolOutcome = await durable.ctx.invoke_tool(
        tool.name, call, args=args, idempotency=idempotency, **options
    )
    return _FunctionToolInvocationResult(*_tool_output(durable.ctx, tool.name, outcome))


def _approved(**arguments: JSON) -> JSON:
    """An agent tool's approval step: the arguments it runs with (edited or not)."""
    return {"approved": dict(arguments)}


def _tool_output(ctx: AsyncRunContext, tool: str, outcome: ToolOutcome) -> tuple[Any, bool]:
    """What the model reads for a call's outcome, and whether it stands for a failure."""
    error = outcome.error if isinstance(outcome.error, dict) else {}
    message = str(error.get("message") or "")
    if outcome.status == "completed":
        return outcome.value, False
    if outcome.status == "failed":
        if error.get("type") == ToolErrorOutput.__name__:
            return message, True
        raise ToolFailed(f"{tool} failed: {error.get('type')}: {message}")
    if outcome.status == "uncertain":
        reason = message or "its worker was lost"
        return UNCERTAIN_OUTPUT.format(tool=tool, reason=reason), True
    status: str = outcome.status  # "rejected" comes with approvals (ctx.invoke_tool(approval=))
    if status == "rejected":
        return message or DEFAULT_APPROVAL_REJECTION_MESSAGE, True
    raise fenced(ctx)  # no outcome the model can read: the run is no longer this handler's


class ToolFailed(Exception):  # noqa: N818 - the SDK's own word for it is an error
    """A tool whose failure the SDK raises rather than tell the model
    (``failure_error_function=None``), replayed as its record says."""
