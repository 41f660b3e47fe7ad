"""``DurableModel``: the SDK's model, each request one step of the run
while a durable run is active (``steps.model_request``; streamed or not),
and the model itself otherwise. A replay that meets another request than
the record fails the run, naming both."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import agents
from agents.items import ModelResponse, TResponseInputItem
from agents.models.interface import Model, ModelTracing
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
)

from runqueue.contrib import steps
from runqueue.contrib.openai_agents.durable import ACTIVE, Durable
from runqueue.contrib.openai_agents.requests import (
    RESPONSE,
    completed_event,
    request_of,
    step_response,
    usage_of,
)
from runqueue.errors import PermanentError
from runqueue.leases import payload_digest
from runqueue.models import ToolInvocation
from runqueue.runtime import aio
from runqueue.types import JSON


async def _model_step(
    durable: Durable,
    model: str,
    request: dict[str, JSON],
    send: Callable[[], Awaitable[steps.ModelResponse]],
) -> ModelResponse:
    """One model request as the run's next step; its SDK response."""
    ctx = durable.ctx
    seq = ctx.sync._seq  # the number model_request's invoke_tool takes, before any await
    try:
        raw = await steps.model_request(ctx, model=model, request=request, send=send)
    except PermanentError as exc:
        recorded = await aio.db(_recorded_call, ctx.lease.run_id, seq)
        summary = {
            "model": model,
            "tools": _names(request["tools"]),
            "handoffs": _names(request["handoffs"]),
            "input_items": len(request["input"]) if isinstance(request["input"], list) else 1,
            "request_sha256": payload_digest(request),
        }
        raise PermanentError(
            f"model request #{seq} does not match the run's record: recorded {recorded}, "
            f"now {steps.step_name(model)} {json.dumps(summary)} ({exc})"
        ) from exc
    return RESPONSE.validate_python(raw)


def _names(definitions: JSON) -> list[JSON]:
    if not isinstance(definitions, list):
        return []
    return [d.get("name") for d in definitions if isinstance(d, dict)]


def _recorded_call(run_id: uuid.UUID, seq: int) -> str:
    row = ToolInvocation.objects.filter(run_id=run_id, seq=seq).values("tool", "arguments").first()
    return "nothing" if row is None else f"{row['tool']} {json.dumps(row['arguments'])}"


def _model_name(model: Model) -> str:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


class DurableModel(Model):
    """The SDK's model, each request a step of the run while a durable run
    is active (and the model itself otherwise)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = _model_name(model)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs)
        options = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        durable = ACTIVE.get()
        if durable is None:
            return await self.model.get_response(*args, tracing, **options)
        request = request_of(self.name, *args, prompt)

        async def send() -> steps.ModelResponse:
            response = await self.model.get_response(*args, tracing, **options)
            return step_response(self.name, response)

        return await _model_step(durable, self.name, request, send)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[Any]:
        """The model's events as they arrive (text deltas to ``ctx.stream``
        too); a replayed request yields only its completed response."""
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs)
        options = {
            "previous_response_id": previous_response_id,
            "conversation_id": conversation_id,
            "prompt": prompt,
        }
        durable = ACTIVE.get()
        if durable is None:
            async for event in self.model.stream_response(*args, tracing, **options):
                yield event
            return
        request = request_of(self.name, *args, prompt)
        events: asyncio.Queue[Any] = asyncio.Queue()

        async def send() -> steps.ModelResponse:
            completed: Response | None = None
            output: list[Any] = []
            async for event in self.model.stream_response(*args, tracing, **options):
                events.put_nowait(event)
                if isinstance(event, ResponseTextDeltaEvent) and durable.stream and event.delta:
                    await durable.ctx.stream(event.delta)
                elif isinstance(event, ResponseOutputItemDoneEvent):
                    output.append(event.item)
                elif isinstance(event, ResponseCompletedEvent):
                    completed = event.response
            if completed is None:
                raise agents.ModelBehaviorError("the model's stream ended without a response")
            response = ModelResponse(
                output=list(completed.output) or output,
                usage=usage_of(completed.usage),
                response_id=completed.id,
            )
            return step_response(self.name, response)

        step = asyncio.ensure_future(_model_step(durable, self.name, request, send))
        live = False
        try:
            while not step.done() or not events.empty():
                if events.empty():
                    waiter = asyncio.ensure_future(events.get())
                    await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    if not waiter.done():
                        waiter.cancel()
                        continue
                    event = waiter.result()
                else:
                    event = events.get_nowait()
                live = True
                yield event
            response = step.result()
        finally:
            if not step.done():
                step.cancel()
        if not live:
            yield completed_event(self.name, response)

    async def close(self) -> None:
        await self.model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.model._cleanup_on_run_end(owner)

    def get_retry_advice(self, request: Any) -> Any:
        return self.model.get_retry_advice(request)
