"""Pydantic AI's durability capability for runqueue (``RunqueueDurability``)
and its operation backend: every durable unit the framework asks for is a
model request (``model_requests``), a tool call (``tools``) or, for
anything else (tool discovery, argument validation, events), run in place,
unrecorded. The steering messages are read before each model request."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from pydantic_ai import messages
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext as AgentRunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from runqueue.contrib import steps
from runqueue.contrib.pydantic_ai.model_requests import model_step
from runqueue.contrib.pydantic_ai.tools import (
    METADATA_KEY,
    ToolPolicy,
    approval_by_runqueue,
    tool_step,
)
from runqueue.models import Idempotency
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.types import JSON

#: The handler's context while an agent runs under ``RunqueueAgent``.
current: contextvars.ContextVar[AsyncRunContext | None] = contextvars.ContextVar(
    "runqueue_pydantic_ai_ctx", default=None
)


class Backend(CallableOperationBackend[Any]):
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
        ctx = current.get()
        if ctx is None:  # outside a handler: a plain run
            return await body()
        if isinstance(operation_id, ModelRequestId):
            return await model_step(ctx, operation_id, body, cache_key)
        if isinstance(operation_id, ToolsetCallToolId):
            policy = config if isinstance(config, ToolPolicy) else ToolPolicy()
            return await tool_step(ctx, operation_id, body, cache_key, policy)
        # Discovery, argument validation, event delivery, token counts: no
        # side effect to record, and the same on every attempt.
        return await body()


class RunqueueDurability(BaseDurabilityCapability[Any]):
    """Pydantic AI's durability capability for runqueue: model requests and
    tool calls become recorded steps of the handler's run (``Backend``).
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
        return current.get() is not None

    async def before_model_request(
        self, ctx: AgentRunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Before each model request, the messages sent to steer the turn
        (``ctx.steers()``, itself a step, so a replay gets the same ones at
        the same point) as a user request enqueued into it: pydantic-ai's
        way to add a message the model sees now and that stays in the
        conversation. The request's hash then covers them."""
        request_context = await super().before_model_request(ctx, request_context)
        durable = current.get()
        if durable is None or self._steer is None:
            return request_context
        texts = await steps.steer_texts(durable, self._steer)
        if texts:
            parts = [messages.UserPromptPart(text) for text in texts]
            ctx.enqueue(messages.ModelRequest(parts=parts))
        return request_context

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        return Backend(
            namer=JournalOperationNamer(self.name or "agent"),
            config=RoleBasedOperationConfig(
                model=None,
                event=None,
                capability=None,
                tool=ToolPolicy(),
                resolve_tool=self._tool_policy,
            ),
        )

    def _tool_policy(
        self, operation_id: DurableOperationId, tool: object, name: str
    ) -> ToolPolicy:
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
        return ToolPolicy(
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
        return wrapped.prepared(approval_by_runqueue)
