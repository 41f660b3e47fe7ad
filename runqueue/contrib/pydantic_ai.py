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
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

from pydantic import TypeAdapter
from pydantic_ai import Agent, messages
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    CallToolResult,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.tools import RunContext as AgentRunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_core import to_jsonable_python

from runqueue.contrib import steps
from runqueue.errors import PermanentError, RunCancelled
from runqueue.models import Idempotency
from runqueue.runtime import aio
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.types import JSON

__all__ = ["METADATA_KEY", "MCP_META_KEY", "RunqueueAgent", "RunqueueDurability", "tool_metadata"]

#: The tool metadata key runqueue reads: ``{"idempotent": bool, "approval": bool}``.
METADATA_KEY = "runqueue"
#: The key of the idempotency key in an MCP call's request ``_meta``.
MCP_META_KEY = "idempotency_key"

#: The handler's context while an agent runs under ``RunqueueAgent``.
_current: contextvars.ContextVar[AsyncRunContext | None] = contextvars.ContextVar(
    "runqueue_pydantic_ai_ctx", default=None
)
#: The idempotency key of the MCP call running now (read by the ``_meta`` hook).
_mcp_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "runqueue_pydantic_ai_mcp_key", default=None
)

_response = TypeAdapter(messages.ModelResponse)
_parameters = TypeAdapter(ModelRequestParameters)
_tool_result: TypeAdapter[Any] = TypeAdapter(CallToolResult)
#: Fields pydantic-ai fills per attempt (clocks, random ids): left out of a request's hash.
_VOLATILE = frozenset({"timestamp", "request_timestamp", "duration", "run_id", "conversation_id"})


def tool_metadata(*, idempotent: bool = False, approval: bool = False) -> dict[str, Any]:
    """A tool's ``metadata=`` declaring how runqueue records it, e.g.
    ``@agent.tool_plain(metadata=tool_metadata(idempotent=True))``."""
    return {METADATA_KEY: {"idempotent": idempotent, "approval": approval}}


@dataclasses.dataclass(frozen=True, slots=True)
class _ToolPolicy:
    """What a tool call's step is recorded with (the backend's per-tool config)."""

    idempotency: str = Idempotency.NON_IDEMPOTENT
    approval: bool | Callable[[dict[str, JSON]], bool] = False


class _Backend(CallableOperationBackend[Any]):
    """Each durable unit the framework asks for, as a runqueue step or in place."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: Any,
    ) -> object:
        ctx = _current.get()
        if ctx is None:  # outside a handler: a plain run
            return await body()
        if isinstance(operation_id, ModelRequestId):
            return await _model_step(ctx, operation_id, body, cache_key)
        if isinstance(operation_id, ToolsetCallToolId):
            policy = config if isinstance(config, _ToolPolicy) else _ToolPolicy()
            return await _tool_step(ctx, operation_id, body, cache_key, policy)
        # Discovery, argument validation, event delivery, token counts: no
        # side effect to record, and the same on every attempt.
        return await body()


async def _model_step(
    ctx: AsyncRunContext,
    operation_id: ModelRequestId,
    body: Callable[[], Awaitable[object]],
    cache_key: tuple[object, ...],
) -> object:
    """One model request as ``steps.model_request``: its record's ``raw`` is
    the payload the framework decodes (the SDK's serialized ModelResponse)."""

    async def send() -> steps.ModelResponse:
        raw = await body()
        response = _response.validate_python(raw)
        return steps.ModelResponse(
            model=response.model_name or operation_id.model_name,
            raw=to_jsonable_python(raw),
            text=response.text or "",
            tool_calls=[
                {"name": call.tool_name, "args": to_jsonable_python(call.args_as_dict())}
                for call in response.tool_calls
            ],
            finish_reason=response.finish_reason,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
        )

    return await steps.model_request(
        ctx, model=operation_id.model_name, request=model_request(cache_key), send=send
    )


def model_request(cache_key: tuple[object, ...]) -> JSON:
    """What identifies a model request, as JSON: its messages (without the
    clocks and random ids pydantic-ai stamps on them each attempt), tool
    definitions and output mode, and settings. The same on every attempt
    that sends the same request."""
    model_id, history, settings, parameters = cache_key[:4]
    sent: list[messages.ModelMessage] = list(cast(Iterable[Any], history))
    dumped = messages.ModelMessagesTypeAdapter.dump_python(sent, mode="json")
    return {
        "model_id": to_jsonable_python(model_id),
        "messages": [_stable(message) for message in dumped],
        "settings": to_jsonable_python(settings),
        "parameters": _parameters.dump_python(
            cast(ModelRequestParameters, parameters), mode="json"
        ),
    }


def _stable(message: dict[str, Any]) -> dict[str, Any]:
    """A dumped message without its volatile fields (its own and its parts')."""
    kept = {k: v for k, v in message.items() if k not in _VOLATILE}
    kept["parts"] = [
        {k: v for k, v in part.items() if k not in _VOLATILE} for part in message["parts"]
    ]
    return kept


async def _tool_step(
    ctx: AsyncRunContext,
    operation_id: ToolsetCallToolId,
    body: Callable[[], Awaitable[object]],
    cache_key: tuple[object, ...],
    policy: _ToolPolicy,
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
        token = _mcp_key.set(idempotency_key)
        try:
            return to_jsonable_python(await body())
        except Exception as exc:
            raised.append(exc)
            raise
        finally:
            _mcp_key.reset(token)

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
    if outcome.status == "failed":
        if raised:
            raise raised[0]
        error = outcome.error if isinstance(outcome.error, dict) else {}
        raise PermanentError(
            f"tool call #{outcome.seq} {tool_name!r} failed on an earlier attempt "
            f"({error.get('type')}: {error.get('message')}); a non-idempotent call is not "
            "run again"
        )
    if outcome.status == "uncertain":
        error = outcome.error if isinstance(outcome.error, dict) else {}
        return _returned(
            f"The outcome of this {tool_name} call is unknown: it started, and was cut short "
            f"before its result was recorded ({error.get('message')}). It may or may not have "
            "taken effect; it did not necessarily fail. Do not assume either."
        )
    if outcome.status == "rejected":
        error = outcome.error if isinstance(outcome.error, dict) else {}
        return _returned(str(error.get("message") or "The tool call was denied."))
    if outcome.status == "fenced":
        raise RunCancelled(ctx.lease.run_id, ctx.lease.cancel_reason or "fenced")
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


class RunqueueDurability(BaseDurabilityCapability[Any]):
    """Pydantic AI's durability capability for runqueue: model requests and
    tool calls become recorded steps of the handler's run (``_Backend``).
    ``RunqueueAgent`` attaches one to each run; there is nothing to register
    before a worker starts."""

    engine_spec = DurabilityEngineSpec(
        engine_name="runqueue",
        durable_unit_noun="step",
        durable_container_noun="run",
        codec=JSON_CODEC,  # every record is jsonb
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",  # one MCP session per agent run
            "dynamic": "enter-never",
        },
        journal_discovery=False,
        sequential_tools_in_durable_context=True,  # call numbers must not depend on timing
        tool_config_key=METADATA_KEY,
    )

    def __init__(
        self,
        *,
        idempotent: Iterable[str] = (),
        approval: Mapping[str, bool | Callable[[dict[str, JSON]], bool]] | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        event_stream_handler: Any = None,
        name: str | None = None,
    ) -> None:
        super().__init__(event_stream_handler=event_stream_handler, name=name)
        self._idempotent = frozenset(idempotent)
        self._approval = dict(approval or {})
        self._steer = steer

    @property
    def in_durable_context(self) -> bool:
        return _current.get() is not None

    async def before_model_request(
        self, ctx: AgentRunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Before each model request, the messages sent to steer the turn
        (``ctx.steers()``, itself a step, so a replay gets the same ones at
        the same point) as a user request enqueued into it: pydantic-ai's
        way to add a message the model sees now and that stays in the
        conversation. The request's hash then covers them."""
        request_context = await super().before_model_request(ctx, request_context)
        durable = _current.get()
        if durable is None or self._steer is None:
            return request_context
        taken = await durable.steers()
        if taken:
            to_text = self._steer
            parts = [messages.UserPromptPart(to_text(payload)) for payload in taken]
            ctx.enqueue(messages.ModelRequest(parts=parts))
        return request_context

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        return _Backend(
            namer=JournalOperationNamer(self.name or "agent"),
            config=RoleBasedOperationConfig(
                model=None,
                event=None,
                capability=None,
                tool=_ToolPolicy(),
                resolve_tool=self._tool_policy,
            ),
        )

    def _tool_policy(
        self, operation_id: DurableOperationId, tool: object, name: str
    ) -> _ToolPolicy:
        """How tool ``name`` is recorded: idempotent when declared so (the
        wrapper's ``idempotent``, the tool's metadata, an MCP tool's
        ``readOnlyHint``/``idempotentHint``), else non-idempotent; approval
        from the wrapper's ``approval``, the tool's metadata, or pydantic-ai's
        ``requires_approval``."""
        tool_def: ToolDefinition | None = getattr(tool, "tool_def", None)
        metadata = (tool_def.metadata or {}) if tool_def is not None else {}
        declared = metadata.get(METADATA_KEY) or {}
        annotations = metadata.get("annotations") or {}
        idempotent = (
            name in self._idempotent
            or bool(declared.get("idempotent"))
            or bool(annotations.get("readOnlyHint"))
            or bool(annotations.get("idempotentHint"))
        )
        approval = self._approval.get(name, bool(declared.get("approval")))
        return _ToolPolicy(
            Idempotency.IDEMPOTENT if idempotent else Idempotency.NON_IDEMPOTENT, approval
        )

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        """The framework's durable toolsets, with ``requires_approval`` tools
        made callable: their approval is runqueue's (``invoke_tool(...,
        approval=True)``), asked when the call is reached, not a deferred
        request that ends the agent run."""
        wrapped = super().get_wrapper_toolset(toolset) or toolset
        if not self.in_durable_context:
            return wrapped
        return wrapped.prepared(_approval_by_runqueue)


def _approval_by_runqueue(
    ctx: AgentRunContext[Any], tool_defs: list[ToolDefinition]
) -> list[ToolDefinition]:
    out = []
    for tool_def in tool_defs:
        if tool_def.kind == "unapproved":
            metadata = dict(tool_def.metadata or {})
            metadata[METADATA_KEY] = {**(metadata.get(METADATA_KEY) or {}), "approval": True}
            tool_def = dataclasses.replace(tool_def, kind="function", metadata=metadata)
        out.append(tool_def)
    return out


class RunqueueAgent:
    """An unchanged ``pydantic_ai.Agent``, run as recorded steps of a runqueue
    handler's run. Build it once, at import time, beside the agent.

    ``idempotent``: names of tools that are safe to run again after a crash
    (the rest are non-idempotent: one cut short ends ``uncertain``).
    ``approval``: tool name to ``True`` or a function of the call's
    arguments, for tools a person approves first (``ctx.invoke_tool``'s
    ``approval``). Both can also be declared on a tool
    (``metadata=tool_metadata(...)``). ``steer``: how a message sent to
    steer the turn (``on_busy="steer"``) reads as the user's words, which
    the agent is given before its next model request
    (``steps.steer_text`` by default); None to leave such messages for the
    session's next turn.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        idempotent: Iterable[str] = (),
        approval: Mapping[str, bool | Callable[[dict[str, JSON]], bool]] | None = None,
        steer: Callable[[JSON], str] | None = steps.steer_text,
        name: str | None = None,
    ) -> None:
        self.agent = agent
        self.idempotent = frozenset(idempotent)
        self.approval = dict(approval or {})
        self.steer = steer
        self.name = name or agent.name or "agent"
        for toolset in agent.toolsets:
            toolset.apply(_send_idempotency_keys)

    def _capability(self, stream: bool) -> RunqueueDurability:
        return RunqueueDurability(
            idempotent=self.idempotent,
            approval=self.approval,
            steer=self.steer,
            event_stream_handler=_stream_text if stream else None,
            name=self.name,
        )

    async def run(
        self,
        user_prompt: Any = None,
        *,
        ctx: RunContext | AsyncRunContext,
        stream: bool = False,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """``agent.run(...)`` inside an ``async def`` handler, every model
        request and tool call a step of ``ctx``'s run. ``stream``: the
        model's text deltas go to ``ctx.stream`` as they arrive (only the
        final responses are recorded)."""
        actx = steps.as_async(ctx)
        capabilities = [*(kwargs.pop("capabilities", None) or ()), self._capability(stream)]
        token = _current.set(actx)
        try:
            return await self.agent.run(user_prompt, capabilities=capabilities, **kwargs)
        finally:
            _current.reset(token)

    def run_sync(
        self,
        user_prompt: Any = None,
        *,
        ctx: RunContext,
        stream: bool = False,
        **kwargs: Any,
    ) -> AgentRunResult[Any]:
        """``run`` from a sync handler: the agent runs on runqueue's loop
        (``runqueue.runtime.aio``) while this thread waits; a cancelled run cancels it."""
        future = aio.run(self.run(user_prompt, ctx=ctx, stream=stream, **kwargs))
        while True:
            try:
                return future.result(timeout=_WAKE_SECONDS)
            except concurrent.futures.TimeoutError:
                if ctx.cancelled.is_set():
                    future.cancel()
                    ctx.check()


#: How often a sync handler waiting for its agent looks at ``ctx.cancelled``.
_WAKE_SECONDS = 0.5


async def _stream_text(
    run_ctx: AgentRunContext[Any], events: AsyncIterable[messages.AgentStreamEvent]
) -> None:
    """The model's text deltas to the run's live stream, as they arrive."""
    ctx = _current.get()
    async for event in events:
        text = ""
        if isinstance(event, messages.PartStartEvent):
            part = event.part  # a part can start with text
            text = part.content if isinstance(part, messages.TextPart) else ""
        elif isinstance(event, messages.PartDeltaEvent) and isinstance(
            event.delta, messages.TextPartDelta
        ):
            text = event.delta.content_delta
        if ctx is not None and text:
            await ctx.stream(text)


def _send_idempotency_keys(toolset: AbstractToolset[Any]) -> None:
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
        key = _mcp_key.get()
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
