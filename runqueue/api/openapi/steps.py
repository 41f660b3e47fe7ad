"""The OpenAPI document's steps: a run's recorded steps and the decision
on a tool call awaiting approval, with their schemas. Apart from the other
resources so that each reads whole; the package assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    REF,
    RUN_ID,
    answer,
    json_content,
    operation,
    page,
    parameter,
    replayed,
)
from runqueue.models import ToolDecision, ToolStatus
from runqueue.types import JSON


def schemas() -> dict[str, JSON]:
    """Step, Steps, ToolDecision and Decided."""
    return {
        "Step": {
            "type": "object",
            "description": "one recorded step: a model request (kind model, its result a "
            "model_response: text, tool_calls, finish_reason, usage, raw), a tool call, a "
            "spawn or a patch decision",
            "required": ["seq", "kind", "tool", "status"],
            "properties": {
                "seq": {"type": "integer", "minimum": 0},
                "kind": {"type": "string", "enum": ["model", "tool", "spawn", "patch"]},
                "tool": {"type": "string"},
                "status": {"type": "string", "enum": list(ToolStatus.values)},
                "idempotency": {"type": "string"},
                "arguments": {},
                "result": {},
                "error": {},
                "approval": {
                    "description": "for a call made with approval: timeout, on_timeout, and "
                    "decided (decision, actor, at, reason, arguments or result), null until "
                    "decided"
                },
                "resolution": {},
                "created_at": {"type": ["string", "null"]},
                "finished_at": {"type": ["string", "null"]},
                "decision": {
                    "type": "string",
                    "description": "where to decide it: present while it awaits approval",
                },
            },
        },
        "Steps": page("steps", "Step", next_described=False),
        "ToolDecision": {
            "type": "object",
            "required": ["decision"],
            "additionalProperties": False,
            "properties": {
                "decision": {"type": "string", "enum": list(ToolDecision.values)},
                "reason": {"type": "string", "description": "told to the handler on reject"},
                "arguments": {"type": "object", "description": "with edit: the arguments run"},
                "result": {"description": "with respond: the result that stands for the call"},
            },
        },
        "Decided": {
            "type": "object",
            "required": ["step", "run"],
            "properties": {"step": {"$ref": REF + "Step"}, "run": {"$ref": REF + "Run"}},
        },
    }


def paths() -> dict[str, JSON]:
    """By route name: a run's steps and a tool call's decision."""
    return {
        "run-steps": {
            "get": operation(
                "getRunSteps",
                [
                    RUN_ID,
                    parameter("after", "query", {"type": "integer"}),
                    parameter("limit", "query", {"type": "integer"}),
                ],
                {"200": answer("a page of steps", "Steps")},
                (400, 401, 404, 405, 500, 503),
                description="The run's recorded steps in order: each model request and "
                "response, each tool call with its arguments, outcome and approval.",
            )
        },
        "run-tool-decision": {
            "post": operation(
                "decideTool",
                [RUN_ID, parameter("seq", "path", {"type": "integer", "minimum": 0})],
                {
                    "200": answer(
                        "the decided call and its run", "Decided", headers=replayed("request")
                    )
                },
                (400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503),
                description="Approve, edit, reject or respond to a tool call awaiting "
                "approval; the run resumes. The same decision again answers as the first "
                "(Idempotent-Replayed); another is 409 tool-not-awaiting-approval.",
                body={"required": True, "content": json_content("ToolDecision")},
            )
        },
    }
