"""A model request as a recorded step of a run, the record every agent
adapter writes, so the admin and the API read one shape whatever the SDK;
and the other steps every adapter takes the same way (the steering
messages read before a request, a step the fence refused).

A model request is a tool call of the run (``ToolInvocation``) named
``model:<model>``, idempotent (sending it again has no side effect, only a
cost), its arguments the request's SHA-256 (so a replay that would send
another request is refused, naming both), its result a ``model_response``
record: the SDK's own serialized response (what a replay gives back) and
the fields a person reads (text, tool calls, finish reason, usage). A
request that failed runs again on the next attempt rather than replaying
its failure. Usage is recorded (``ctx.record_usage``) when a response
arrives, before its step is: an attempt lost in between sent the request
and pays for it; a replay pays nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runqueue.errors import RunCancelled
from runqueue.leases import payload_digest
from runqueue.models import Idempotency, ToolInvocation
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.tools import MODEL_STEP_PREFIX
from runqueue.types import JSON

#: The ``kind`` of a model step's result.
MODEL_RESPONSE = "model_response"
_NAME_MAX = 255
#: The members a steering message's text may be in (``steer_text``).
_TEXT_KEYS = ("text", "prompt", "message", "content")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """One model response as an adapter hands it to ``model_request``:
    ``raw`` is what a replay gives back (the SDK's own serialization); the
    rest is what support staff read on the run's page."""

    model: str
    raw: JSON
    text: str = ""
    tool_calls: list[dict[str, JSON]] = field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    def record(self) -> dict[str, JSON]:
        return {
            "kind": MODEL_RESPONSE,
            "model": self.model,
            "text": self.text,
            "tool_calls": list(self.tool_calls),
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
            "raw": self.raw,
        }


def steer_text(payload: JSON) -> str:
    """A message sent to steer a turn (``on_busy="steer"``) as the user's
    words to the model: text as it is, the text of an object with one
    text member of the usual names (``text``, ``prompt``, ``message``,
    ``content``), else its JSON."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict):
        texts = [payload[k] for k in _TEXT_KEYS if isinstance(payload.get(k), str)]
        if len(texts) == 1:
            return str(texts[0])
    return json.dumps(payload)


def step_name(model: str) -> str:
    """The tool name of a request to ``model``."""
    return (MODEL_STEP_PREFIX + model)[:_NAME_MAX]


def is_model_step(record: ToolInvocation) -> bool:
    return record.tool.startswith(MODEL_STEP_PREFIX)


async def steer_texts(ctx: AsyncRunContext, to_text: Callable[[JSON], str]) -> list[str]:
    """The messages sent to steer the turn since it last looked
    (``ctx.steers()``, itself a step, so a replay reads the same ones at the
    same point), each as the user's words (``to_text``: ``steer_text`` or
    the caller's own)."""
    return [to_text(payload) for payload in await ctx.steers()]


def fenced(ctx: AsyncRunContext) -> RunCancelled:
    """What an adapter raises for a step the fence refused: the run is no
    longer this handler's, and nothing of the step was written."""
    return RunCancelled(ctx.lease.run_id, ctx.lease.cancel_reason or "fenced")


async def model_request(
    ctx: AsyncRunContext,
    *,
    model: str,
    request: JSON,
    send: Callable[[], Awaitable[ModelResponse]],
) -> JSON:
    """Send one model request as the run's next step, or replay its record:
    the response's ``raw``. ``request`` is hashed into the step's arguments.
    The request's own exception is raised again as it was (the SDK's retry
    and fallback logic sees it); RunCancelled once the run is not ours."""
    raised: list[BaseException] = []

    async def step(request_sha256: str) -> JSON:  # invoke_tool passes the step's arguments
        try:
            response = await send()
        except Exception as exc:
            raised.append(exc)
            raise
        if response.input_tokens or response.output_tokens:
            await ctx.record_usage(
                model=response.model[:_NAME_MAX],
                input_tokens=response.input_tokens,
                output_tokens=response.output_tokens,
            )
        return response.record()

    outcome = await ctx.invoke_tool(
        step_name(model),
        step,
        args={"request_sha256": payload_digest(request)},
        idempotency=Idempotency.IDEMPOTENT,
        rerun_failed=True,
    )
    if outcome.status == "completed":
        value: Any = outcome.value
        return value["raw"] if isinstance(value, dict) else value
    if outcome.status == "failed" and raised:
        raise raised[0]
    if outcome.status == "fenced":
        raise fenced(ctx)
    raise RuntimeError(f"model request #{outcome.seq} ended {outcome.status}: {outcome.error}")
