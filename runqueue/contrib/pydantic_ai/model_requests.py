"""Model requests under Pydantic AI: each one the framework hands the
backend becomes one ``steps.model_request`` step, identified by what it
asks (``model_request``: its messages without the clocks and random ids
pydantic-ai stamps on them each attempt, its tool definitions and output
mode, its settings), its record holding the SDK's own serialized
``ModelResponse``, which a replay gives back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from pydantic import TypeAdapter
from pydantic_ai import messages
from pydantic_ai.durable_exec import ModelRequestId
from pydantic_ai.models import ModelRequestParameters
from pydantic_core import to_jsonable_python

from runqueue.contrib import steps
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.types import JSON

_response = TypeAdapter(messages.ModelResponse)
_parameters = TypeAdapter(ModelRequestParameters)
#: Fields pydantic-ai fills per attempt (clocks, random ids): left out of a request's hash.
_VOLATILE = frozenset({"timestamp", "request_timestamp", "duration", "run_id", "conversation_id"})


async def model_step(
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
