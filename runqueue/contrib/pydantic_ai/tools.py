"""Tool calls under Pydantic AI: each one the framework hands the backend
becomes one ``ctx.invoke_tool`` step (``tool_step``), recorded as its tool
policy says (``ToolPolicy``: idempotent or not, approved by a person or
not, from the wrapper's arguments or the tool's ``metadata``), its record
the framework's own encoding of the call's result; a recorded outcome is
told to the model as the tool's return. A ``requires_approval`` tool is
made callable (``approval_by_runqueue``): its approval is runqueue's."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai.durable_exec import JSON_CODEC, CallToolResult, ToolsetCallToolId
from pydantic_ai.tools import RunContext as AgentRunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_jsonable_python

from runqueue.contrib import steps
from runqueue.contrib.pydantic_ai.mcp import mcp_key
from runqueue.errors import PermanentError
from runqueue.models import Idempotency
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.types import JSON

#: The tool metadata key runqueue reads: ``{"idempotent": bool, "approval": bool}``.
METADATA_KEY = "runqueue"


def tool_metadata(*, idempotent: bool = False, approval: bool = False) -> dict[str, Any]:
    """A tool's ``metadata=`` declaring how runqueue records it, e.g.
    ``@agent.tool_plain(metadata=tool_metadata(idempotent=True))``."""
    return {METADATA_KEY: {"idempotent": idempotent, "approval": approval}}


@dataclasses.dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What a tool call's step is recorded with (the backend's per-tool config)."""

    idempotency: str = Idempotency.NON_IDEMPOTENT
    approval: bool | Callable[[dict[str, JSON]], bool] = False


async def tool_step(
    ctx: AsyncRunContext,
    operation_id: ToolsetCallToolId,
    body: Callable[[], Awaitable[object]],
    cache_key: tuple[object, ...],
    policy: ToolPolicy,
) -> object:
    """One tool call as ``ctx.invoke_tool``: the framework's own encoding
    of its result recorded, or what its recorded outcome tells the model."""
    tool_name, tool_args, tool = str(cache_key[0]), cache_key[1], cache_key[3]
    args = to_jsonable_python(tool_args)
    raised: list[BaseException] = []

    async def call(idempotency_key: str, **given: JSON) -> JSON:
        # invoke_tool passes the recorded (JSON) arguments, or those a person
        # edited; the body holds the validated ones, which an edit replaces.
        if given != args and isinstance(tool_args, dict):
            _edit_arguments(tool_args, tool, given)
        token = mcp_key.set(idempotency_key)
        try:
            return to_jsonable_python(await body())
        except Exception as exc:
            raised.append(exc)
            raise
        finally:
            mcp_key.reset(token)

    idempotent = policy.idempotency == Idempotency.IDEMPOTENT
    outcome = await ctx.invoke_tool(
        tool_name,
        call,
        args=args if isinstance(args, dict) else {"args": args},
        idempotency=policy.idempotency,
        rerun_failed=idempotent,
        approval=policy.approval or None,  # ApprovalPending propagates, untouched
    )
    if outcome.status == "completed":
        decided = outcome.approval.get("decided") if isinstance(outcome.approval, dict) else None
        if isinstance(decided, dict) and decided.get("decision") == "respond":
            return _returned(outcome.value)  # a person's result stands for the call
        return _as_result(outcome.value)
    error = outcome.error if isinstance(outcome.error, dict) else {}
    if outcome.status == "failed":
        if raised:
            raise raised[0]
        raise PermanentError(
            f"tool call #{outcome.seq} {tool_name!r} failed on an earlier attempt "
            f"({error.get('type')}: {error.get('message')}); a non-idempotent call is not "
            "run again"
        )
    if outcome.status == "uncertain":
        return _returned(
            f"The outcome of this {tool_name} call is unknown: it started, and was cut short "
            f"before its result was recorded ({error.get('message')}). It may or may not have "
            "taken effect; it did not necessarily fail. Do not assume either."
        )
    if outcome.status == "rejected":
        return _returned(str(error.get("message") or "The tool call was denied."))
    if outcome.status == "fenced":
        raise steps.fenced(ctx)
    raise RuntimeError(f"tool call #{outcome.seq} {tool_name!r} ended {outcome.status}")


def _edit_arguments(tool_args: dict[str, Any], tool: object, edited: dict[str, JSON]) -> None:
    """Replace the arguments the call runs with by ``edited`` (an approver's
    edit), validated as the model's were."""
    validator = getattr(tool, "args_validator", None)
    validated = validator.validate_python(edited) if validator is not None else edited
    tool_args.clear()
    tool_args.update(validated)


def _as_result(value: JSON) -> object:
    """A completed call's value as the framework's payload: what this adapter
    recorded, or a plain value given in the call's place (an approver's
    response), returned to the model as the tool's return."""
    if isinstance(value, dict) and "kind" in value:
        with contextlib.suppress(ValueError):
            JSON_CODEC.load(CallToolResult, value)
            return value
    return _returned(value)


def _returned(value: JSON) -> object:
    """``value`` as a tool's plain return, in the framework's result encoding."""
    payload = {"kind": "tool_return", "result": value}
    JSON_CODEC.load(CallToolResult, payload)  # the encoding still holds (ValueError if not)
    return payload


def approval_by_runqueue(
    ctx: AgentRunContext[Any], tool_defs: list[ToolDefinition]
) -> list[ToolDefinition]:
    """``requires_approval`` tools made callable, their approval declared in
    runqueue's metadata instead: asked when the call is reached
    (``ctx.invoke_tool(..., approval=True)``), not a deferred request that
    ends the agent run."""
    out = []
    for tool_def in tool_defs:
        if tool_def.kind == "unapproved":
            metadata = dict(tool_def.metadata or {})
            metadata[METADATA_KEY] = {**(metadata.get(METADATA_KEY) or {}), "approval": True}
            tool_def = dataclasses.replace(tool_def, kind="function", metadata=metadata)
        out.append(tool_def)
    return out
