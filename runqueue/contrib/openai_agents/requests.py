"""The record of one model request: what it asks, deterministically (no
ids, no timestamps: ``request_of``, hashed into the step's arguments), and
the SDK's response as the step records it (``step_response``: the SDK's own
serialization, which a replay validates back, and the fields a person
reads), and a replayed response as the event a stream ends with
(``completed_event``)."""

from __future__ import annotations

from typing import Any

import pydantic
from agents.items import ItemHelpers, ModelResponse, TResponseInputItem
from agents.tool import FunctionTool
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from runqueue.contrib import steps
from runqueue.contrib.openai_agents.durable import jsonable
from runqueue.types import JSON

RESPONSE: pydantic.TypeAdapter[ModelResponse] = pydantic.TypeAdapter(ModelResponse)


def _without_ids(items: JSON) -> JSON:
    """Input items without their ``id`` members: an item's identity is not
    what the request asks (call ids, which tie outputs to calls, stay)."""
    if isinstance(items, list):
        return [
            {k: v for k, v in item.items() if k != "id"} if isinstance(item, dict) else item
            for item in items
        ]
    return items


def _tool_definition(tool: Any) -> JSON:
    if isinstance(tool, FunctionTool):
        return {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": jsonable(tool.params_json_schema),
            "strict": tool.strict_json_schema,
        }
    # A hosted tool (web search, file search, ...): the model runs it inside the request.
    return {"type": type(tool).__name__, "name": getattr(tool, "name", None)}


def request_of(
    model: str,
    system_instructions: str | None,
    items: str | list[TResponseInputItem],
    model_settings: Any,
    tools: list[Any],
    output_schema: Any,
    handoffs: list[Any],
    prompt: Any,
) -> dict[str, JSON]:
    """What a model request asks, deterministically: no ids, no timestamps."""
    schema: JSON = None
    if output_schema is not None and not output_schema.is_plain_text():
        schema = {"name": output_schema.name(), "schema": jsonable(output_schema.json_schema())}
    return {
        "model": model,
        "instructions": system_instructions,
        "input": _without_ids(jsonable(items)),
        "settings": jsonable(model_settings.to_json_dict()),
        "tools": [_tool_definition(tool) for tool in tools],
        "handoffs": [
            {
                "name": handoff.tool_name,
                "description": handoff.tool_description,
                "parameters": jsonable(handoff.input_json_schema),
            }
            for handoff in handoffs
        ],
        "output_schema": schema,
        "prompt": jsonable(prompt),
    }


def step_response(model: str, response: ModelResponse) -> steps.ModelResponse:
    """The step's record of an SDK response: the SDK's own serialization as
    ``raw`` (what a replay validates back), the rest for people."""
    text = "".join(
        ItemHelpers.extract_last_text(item) or ""
        for item in response.output
        if isinstance(item, ResponseOutputMessage)
    )
    calls: list[dict[str, JSON]] = [
        {"name": item.name, "arguments": item.arguments, "call_id": item.call_id}
        for item in response.output
        if isinstance(item, ResponseFunctionToolCall)
    ]
    return steps.ModelResponse(
        model=model,
        # exclude_unset: the items validate back as they were, the fields their
        # provider left out still unset, so the SDK builds the next request
        # from a replayed response exactly as from the live one.
        raw=RESPONSE.dump_python(response, mode="json", by_alias=True, exclude_unset=True),
        text=text,
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
        input_tokens=response.usage.input_tokens,
        output_tokens=response.usage.output_tokens,
    )


def usage_of(usage: ResponseUsage | None) -> Usage:
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=usage.input_tokens_details,
        output_tokens_details=usage.output_tokens_details,
    )


def completed_event(model: str, response: ModelResponse) -> ResponseCompletedEvent:
    """A replayed response as the event a stream ends with."""
    usage = response.usage
    return ResponseCompletedEvent(
        type="response.completed",
        sequence_number=0,
        response=Response(
            id=response.response_id or "",
            created_at=0,
            model=model,
            object="response",
            output=response.output,
            tool_choice="auto",
            tools=[],
            top_p=None,
            parallel_tool_calls=False,
            status="completed",
            usage=ResponseUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                input_tokens_details=InputTokensDetails.model_validate(
                    usage.input_tokens_details.model_dump()
                ),
                output_tokens_details=OutputTokensDetails.model_validate(
                    usage.output_tokens_details.model_dump()
                ),
            ),
        ),
    )
