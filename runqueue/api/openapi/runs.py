"""The OpenAPI document's runs: ``/api/runs/`` (submit), a run read,
cancelled, paused, resumed, signalled or answered, and the schemas of a run
and of those requests. Apart from the other resources so that each reads
whole; the package assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    NULLABLE_TIME,
    REF,
    RUN_ID,
    UUID,
    answer,
    idempotency_key,
    json_content,
    operation,
    parameter,
    replayed,
)
from runqueue.api.parsing import MAX_REASON
from runqueue.models import PriorityClass, RunStatus
from runqueue.submission import fields as submission_fields
from runqueue.types import JSON

#: The body of a write that takes any JSON, or none.
_ANY_BODY = {"required": False, "content": {"application/json": {"schema": {}}}}
_REASON = {"type": "string", "maxLength": MAX_REASON, "pattern": "^[^\\u0000]*$"}
_LOCATION = {"Location": {"schema": {"type": "string"}, "description": "the run's URL"}}
_OUTCOME = {
    "Submit-Outcome": {
        "schema": {"type": "string"},
        "description": "what became of the submit: created, enqueued, merged, steered, "
        "interrupted, rolled_back or input_delivered (a replay: the first request's)",
    }
}


def schemas(kinds: list[str]) -> dict[str, JSON]:
    """SubmitRun (its ``kind`` one of ``kinds``), CancelRun, PauseRun,
    Signalled, and the Run with its Wait, Failure and Usage."""
    return {
        "SubmitRun": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind"],
            "properties": submission_fields.api_properties(kinds),
        },
        "CancelRun": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "reason": _REASON,
                "cascade": {
                    "type": "boolean",
                    "description": "cancel the run's descendants too (default true)",
                },
            },
        },
        "PauseRun": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "reason": _REASON,
                "tree": {
                    "type": "boolean",
                    "description": "the run's descendants too (default false)",
                },
            },
        },
        "Signalled": {
            "type": "object",
            "required": ["delivery", "run"],
            "properties": {
                "delivery": {
                    "type": "string",
                    "enum": ["delivered", "kept"],
                    "description": "delivered: the run waited for this signal and is queued "
                    "again with its data as input; kept: in the run's mailbox until a wait "
                    "names it",
                },
                "run": {"$ref": REF + "Run"},
            },
        },
        "Wait": {
            "type": ["object", "null"],
            "description": "what a waiting run waits for (null unless it waits)",
            "properties": {
                "reason": {
                    "type": "string",
                    "enum": ["children", "signal", "timer", "user", "event"],
                },
                "name": {"type": "string", "description": "the signal's or the event's name"},
                "match": {
                    "type": ["object", "null"],
                    "description": "what the event's data must contain (reason event); null "
                    "otherwise",
                },
                "since": NULLABLE_TIME,
                "until": NULLABLE_TIME,
                "question": {
                    "description": "what the run asked the user (ctx.ask_user) while it waits "
                    "for the user (reason user); null otherwise. Answer it at links.input"
                },
            },
        },
        "Failure": {
            "type": ["object", "null"],
            "properties": {
                "classification": {"type": ["string", "null"]},
                "error_type": {"type": ["string", "null"]},
                "message": {"type": ["string", "null"]},
                "attempt": {"type": ["integer", "null"]},
            },
        },
        "Usage": {
            "type": "object",
            "properties": {
                "input_tokens": {"type": "integer", "minimum": 0},
                "output_tokens": {"type": "integer", "minimum": 0},
                "cost": {
                    "type": "string",
                    "description": "a decimal number, in the prices' currency: the calls "
                    "with a known cost",
                },
                "calls": {"type": "integer", "minimum": 0},
                "unpriced_calls": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "calls recorded without a cost (not in cost)",
                },
            },
        },
        "Run": {
            "type": "object",
            "required": ["id", "kind", "status", "priority", "links"],
            "properties": {
                "id": UUID,
                "kind": {"type": "string"},
                "status": {"type": "string", "enum": list(RunStatus.values)},
                "parent_id": {
                    "type": ["string", "null"],
                    "format": "uuid",
                    "description": "the run that spawned this one (ctx.spawn)",
                },
                "forked_from": {
                    "type": ["string", "null"],
                    "format": "uuid",
                    "description": "the finished run this one was forked from (runqueue.fork)",
                },
                "forks": {
                    "type": "array",
                    "items": UUID,
                    "description": "the runs forked from this one, newest first (at most 100)",
                },
                "children_open": {"type": "integer", "minimum": 0},
                "handler_version": {
                    "type": ["integer", "null"],
                    "description": "the version of its kind's handler the run is pinned to "
                    "(set by its first claim; null until then)",
                },
                "wait": {"$ref": REF + "Wait"},
                "timed_out": {"type": "boolean"},
                "session_id": {"type": ["string", "null"]},
                "place": {
                    "type": ["integer", "null"],
                    "description": "a pending run's place in its session's line (lowest "
                    "first); kept once it is queued",
                },
                "interrupted_id": {
                    "type": ["string", "null"],
                    "format": "uuid",
                    "description": "the run this one interrupted (on_busy interrupt)",
                },
                "session": {"$ref": REF + "SessionLine"},
                "concurrency_key": {
                    "type": "string",
                    "description": "runs with the same key share a concurrency cap per class "
                    "(the tenant unless the submitting code chose another)",
                },
                "priority": {"type": "integer"},
                "priority_class": {"type": "string", "enum": list(PriorityClass.slugs())},
                "payload": {"description": "the first message's payload"},
                "payloads": {
                    "type": "array",
                    "description": "the turn's messages in order: several when on_busy merge "
                    "joined them",
                },
                "input": {},
                "result": {},
                "failure": {"$ref": REF + "Failure"},
                "attempts": {"type": "integer"},
                "max_attempts": {"type": "integer"},
                "scheduled_for": NULLABLE_TIME,
                "paused_at": {
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "when it was paused (null: not paused): not claimed, its "
                    "start deadline frozen, until resumed",
                },
                "start_by": {
                    **NULLABLE_TIME,
                    "description": "until when the run may first be claimed (start_within); "
                    "null once claimed, or without a start deadline",
                },
                "max_duration": {
                    "type": ["number", "null"],
                    "description": "the longest an attempt may run, in seconds: past it the "
                    "handler is cancelled and the run fails with reason max_duration",
                },
                "created_at": NULLABLE_TIME,
                "started_at": NULLABLE_TIME,
                "finished_at": NULLABLE_TIME,
                "usage": {"$ref": REF + "Usage", "description": "what this run recorded"},
                "tree_usage": {
                    "$ref": REF + "Usage",
                    "description": "what the run's tree (its root and every descendant) recorded",
                },
                "spend_cap": {
                    "type": ["string", "null"],
                    "description": "the tree's spend cap, a decimal number (null: none)",
                },
                "links": {
                    "type": "object",
                    "properties": {
                        "self": {"type": "string"},
                        "events": {"type": "string"},
                        "stream": {"type": "string"},
                        "cancel": {"type": "string"},
                        "pause": {"type": "string"},
                        "resume": {"type": "string"},
                        "steps": {"type": "string"},
                        "input": {
                            "type": "string",
                            "description": "where to answer the run's question: present "
                            "only while it waits for the user",
                        },
                    },
                },
            },
        },
    }


def paths() -> dict[str, JSON]:
    """By route name: a run submitted, read, and each write on it."""
    writes = (401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503)
    return {
        "runs": {
            "post": operation(
                "submitRun",
                [idempotency_key(required=True)],
                {
                    "201": answer(
                        "run created: queued, pending behind the session's active run "
                        "(on_busy enqueue or steer), or interrupting it (or a replay of that)",
                        "Run",
                        headers=_LOCATION | _OUTCOME | replayed("request"),
                    ),
                    "202": answer(
                        "input delivered to the session's waiting run, or the payload merged "
                        "into its turn not started yet (on_busy merge)",
                        "Run",
                        headers=_LOCATION | _OUTCOME | replayed("request"),
                    ),
                },
                (400, 401, 403, 405, 409, 413, 415, 422, 429, 500, 503),
                summary="Create a run, or deliver input to the session's waiting run",
                body={"required": True, "content": json_content("SubmitRun")},
            )
        },
        "run": {
            "get": operation(
                "getRun", [RUN_ID], {"200": answer("the run", "Run")}, (401, 404, 405, 500, 503)
            )
        },
        "run-cancel": _run_write("cancelRun", "CancelRun", "the cancelled run", writes),
        "run-pause": _run_write(
            "pauseRun",
            "PauseRun",
            "the run",
            writes,
            description="Pause a run (tree: and every run below it): not claimed, its start "
            "deadline frozen; a running one is given back at its next step. Pausing a paused "
            "run again changes nothing.",
        ),
        "run-resume": _run_write(
            "resumeRun",
            "PauseRun",
            "the run",
            (401, 403, 404, 405, 413, 415, 422, 429, 500, 503),
            description="Resume a paused run (tree: and every run below it).",
        ),
        "run-signal": {
            "post": operation(
                "signalRun",
                [
                    RUN_ID,
                    parameter(
                        "name", "path", {"type": "string", "minLength": 1, "maxLength": 255}
                    ),
                ],
                {"202": answer("delivered or kept", "Signalled")},
                (400, *writes),
                description="Send a signal to a run of your tenant; the body (any JSON, or "
                "none) is its data, the run's input when a wait for that name ends.",
                body=_ANY_BODY,
            )
        },
        "run-input": {
            "post": operation(
                "answerRun",
                [RUN_ID, idempotency_key(required=False)],
                {
                    "202": answer(
                        "the answer is the run's input; the run is queued (or a replay of that)",
                        "Run",
                        headers=_LOCATION | replayed("request"),
                    ),
                },
                (400, *writes),
                summary="Answer a run waiting for the user, whatever its session",
                description="The body (any JSON, or none for null) is the run's input, as the "
                "payload of a submit to its session would be: the run is queued again and its "
                "handler resumes with it as ctx.input. Its question is wait.question in the "
                "run. 409 run-not-waiting-for-user once answered. An Idempotency-Key "
                "(optional) makes a retry safe, as on a submit: the same answer again is the "
                "first response with Idempotent-Replayed: true; the key with another answer or "
                "run is 422 idempotency-key-reused.",
                body=_ANY_BODY,
            )
        },
    }


def _run_write(
    operation_id: str,
    body: str,
    answered: str,
    codes: tuple[int, ...],
    *,
    description: str | None = None,
) -> JSON:
    """A POST on a run with an optional ``body`` schema, answered with the run."""
    return {
        "post": operation(
            operation_id,
            [RUN_ID],
            {"200": answer(answered, "Run")},
            codes,
            description=description,
            body={"required": False, "content": json_content(body)},
        )
    }
