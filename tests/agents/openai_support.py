"""A scripted model for the OpenAI Agents SDK adapter's tests: it answers
from what it is asked (a policy over the request's input items), counts
what it is sent, and never touches the network."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pydantic_core
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.usage import Usage
from openai.types.responses import ResponseTextDeltaEvent

from runqueue.contrib.openai_agents import _completed_event

Policy = Callable[[list[dict[str, Any]]], list[Any]]


def items_of(request: Any) -> list[dict[str, Any]]:
    if isinstance(request, str):
        return [{"role": "user", "content": request}]
    return pydantic_core.to_jsonable_python(request, by_alias=True)


def outputs(items: list[dict[str, Any]]) -> dict[str, str]:
    """Each tool call's output the request carries, by tool name."""
    names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
    return {
        names[i["call_id"]]: i["output"]
        for i in items
        if i.get("type") == "function_call_output" and i["call_id"] in names
    }


def calls(items: list[dict[str, Any]]) -> list[str]:
    return [i["name"] for i in items if i.get("type") == "function_call"]


def call(name: str, args: dict[str, Any], items: list[dict[str, Any]]) -> Any:
    """A tool call whose id follows from the request (the same on every attempt)."""
    return function_call(name, args, call_id=f"call-{name}-{len(items)}")


def say(text: str) -> Any:
    return assistant_message(text)


def _name(tool: Any) -> str:
    return getattr(tool, "name", None) or tool.tool_name


class ScriptedModel(Model):
    """The SDK's Model interface over a policy: ``sent`` lists a digest of
    every request that reached it (a request sent twice shows twice),
    ``requests`` their input items."""

    def __init__(self, policy: Policy, *, name: str = "scripted-1", usage: int = 10) -> None:
        self.policy = policy
        self.model = name
        self.usage = usage
        self.sent: list[str] = []
        self.requests: list[list[dict[str, Any]]] = []

    def _respond(self, system_instructions: str | None, request: Any, tools: list[Any]) -> Any:
        items = items_of(request)
        digest = hashlib.sha256(
            json.dumps([system_instructions, items, [_name(t) for t in tools]]).encode()
        ).hexdigest()
        self.sent.append(digest)
        self.requests.append(items)
        return ModelResponse(
            output=self.policy(items),
            usage=Usage(
                requests=1,
                input_tokens=self.usage,
                output_tokens=self.usage // 2,
                total_tokens=self.usage + self.usage // 2,
            ),
            response_id=f"resp-{len(self.sent)}",
        )

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        return self._respond(system_instructions, input, list(tools) + list(handoffs))

    async def stream_response(  # type: ignore[override]
        self,
        system_instructions: str | None,
        input: Any,  # noqa: A002 - the SDK's name
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[Any]:
        response = self._respond(system_instructions, input, list(tools) + list(handoffs))
        for n, item in enumerate(response.output):
            if item.type != "message":
                continue
            text = item.content[0].text
            for piece in [text[i : i + 4] for i in range(0, len(text), 4)]:
                yield ResponseTextDeltaEvent(
                    type="response.output_text.delta",
                    content_index=0,
                    delta=piece,
                    item_id=item.id,
                    output_index=n,
                    sequence_number=0,
                    logprobs=[],
                )
        yield _completed_event(self.model, response)
