"""The OpenAPI 3.1 document of the API, built from the URLconf and registry,
and served at ``/api/openapi.json``.

Paths come from ``reverse`` (true to where the API is mounted); the ``kind``
enum lists the kinds this deployment can run. The problem types are listed
under ``x-problem-types``.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from runqueue import registry, submission_fields
from runqueue.api import openapi_schedules
from runqueue.api.errors import PROBLEM_BASE, PROBLEM_CONTENT_TYPE, PROBLEMS, ApiError
from runqueue.api.parsing import KEY_RULE, MAX_REASON
from runqueue.conf import MAX_EVENTS_PAGE_SIZE, RESERVED_KIND_PREFIXES, get_settings
from runqueue.models import PriorityClass, RunStatus, ToolDecision, ToolStatus
from runqueue.submission_rules import KEY_PATTERN, TEXT_LIMITS
from runqueue.types import JSON

_REF = "#/components/schemas/"
_NO_NUL = "^[^\\u0000]+$"


def _path(name: str) -> str:
    if name == "runs":
        return reverse("runqueue-api:runs")
    if name == "event":
        return reverse("runqueue-api:event", kwargs={"name": "NAME"}).replace("NAME", "{name}")
    if name == "run-signal":
        kwargs = {"run_id": "RUNID", "name": "SIGNAL"}
        url = reverse(f"runqueue-api:{name}", kwargs=kwargs)
        return url.replace("RUNID", "{run_id}").replace("SIGNAL", "{name}")
    if name == "run-tool-decision":
        url = reverse(f"runqueue-api:{name}", kwargs={"run_id": "RUNID", "seq": "SEQ"})
        return url.replace("RUNID", "{run_id}").replace("SEQ", "{seq}")
    if name.startswith("session"):
        url = reverse(f"runqueue-api:{name}", kwargs={"session_id": "SESSIONID"})
        return url.replace("SESSIONID", "{session_id}")
    return reverse(f"runqueue-api:{name}", kwargs={"run_id": "RUNID"}).replace("RUNID", "{run_id}")


def _problems(*codes: int) -> dict[str, JSON]:
    return {
        str(code): {
            "description": ", ".join(
                slug for slug, (status, _title) in PROBLEMS.items() if status == code
            ),
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": _REF + "Problem"}}},
        }
        for code in codes
    }


def _json(schema: str) -> dict[str, JSON]:
    return {"application/json": {"schema": {"$ref": _REF + schema}}}


_RUN_ID = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}
_SESSION_ID = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "description": "the session's id, in the caller's tenant (one holding '/' cannot be "
    "named in a path)",
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": TEXT_LIMITS["session_id"],
        "pattern": "^[^/\\u0000]+$",
    },
}
_SESSION_CURSOR = "^[0-9a-f]{32}:[0-9]{1,19}([.][0-9a-z]{1,13})?$"
_LOCATION = {"Location": {"schema": {"type": "string"}, "description": "the run's URL"}}
_OUTCOME = {
    "Submit-Outcome": {
        "schema": {"type": "string"},
        "description": "what became of the submit: created, enqueued, merged, steered, "
        "interrupted, rolled_back or input_delivered (a replay: the first request's)",
    }
}
_REPLAYED = {
    "Idempotent-Replayed": {
        "schema": {"type": "string", "enum": ["true"]},
        "description": "present on a replay of an earlier request with the same key",
    }
}


def _kinds() -> list[str]:
    """The kinds the API may submit (and schedule) in this deployment."""
    allowed = set(get_settings().API_KINDS)
    return [
        k for k in registry.kinds() if k in allowed and not k.startswith(RESERVED_KIND_PREFIXES)
    ]


def _schemas() -> dict[str, JSON]:
    nullable_time = {"type": ["string", "null"], "format": "date-time"}
    kinds = _kinds()
    return {
        **openapi_schedules.schemas(kinds),
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
                "reason": {"type": "string", "maxLength": MAX_REASON, "pattern": "^[^\\u0000]*$"},
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
                "reason": {"type": "string", "maxLength": MAX_REASON, "pattern": "^[^\\u0000]*$"},
                "tree": {
                    "type": "boolean",
                    "description": "the run's descendants too (default false)",
                },
            },
        },
        "EventReceived": {
            "type": "object",
            "required": ["name", "key", "received_at", "started", "started_runs"],
            "properties": {
                "name": {"type": "string"},
                "key": {"type": "string"},
                "received_at": {"type": "string", "format": "date-time"},
                "started": {
                    "type": "array",
                    "items": {"type": "string", "format": "uuid"},
                    "description": "the runs the event's triggers started (the first "
                    "delivery's, on a replay)",
                },
                "started_runs": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "their URLs",
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
                "run": {"$ref": _REF + "Run"},
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
                "since": nullable_time,
                "until": nullable_time,
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
                "id": {"type": "string", "format": "uuid"},
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
                    "items": {"type": "string", "format": "uuid"},
                    "description": "the runs forked from this one, newest first (at most 100)",
                },
                "children_open": {"type": "integer", "minimum": 0},
                "handler_version": {
                    "type": ["integer", "null"],
                    "description": "the version of its kind's handler the run is pinned to "
                    "(set by its first claim; null until then)",
                },
                "wait": {"$ref": _REF + "Wait"},
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
                "session": {"$ref": _REF + "SessionLine"},
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
                "failure": {"$ref": _REF + "Failure"},
                "attempts": {"type": "integer"},
                "max_attempts": {"type": "integer"},
                "scheduled_for": nullable_time,
                "paused_at": {
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "when it was paused (null: not paused): not claimed, its "
                    "start deadline frozen, until resumed",
                },
                "start_by": {
                    **nullable_time,
                    "description": "until when the run may first be claimed (start_within); "
                    "null once claimed, or without a start deadline",
                },
                "max_duration": {
                    "type": ["number", "null"],
                    "description": "the longest an attempt may run, in seconds: past it the "
                    "handler is cancelled and the run fails with reason max_duration",
                },
                "created_at": nullable_time,
                "started_at": nullable_time,
                "finished_at": nullable_time,
                "usage": {"$ref": _REF + "Usage", "description": "what this run recorded"},
                "tree_usage": {
                    "$ref": _REF + "Usage",
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
        "Steps": {
            "type": "object",
            "required": ["steps", "next"],
            "properties": {
                "steps": {"type": "array", "items": {"$ref": _REF + "Step"}},
                "next": {"type": ["string", "null"]},
            },
        },
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
            "properties": {"step": {"$ref": _REF + "Step"}, "run": {"$ref": _REF + "Run"}},
        },
        "SessionTurn": {
            "type": "object",
            "required": ["id", "status", "place"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "status": {"type": "string", "enum": list(RunStatus.values)},
                "place": {"type": ["integer", "null"]},
            },
        },
        "Ending": {
            "type": ["object", "null"],
            "description": "how a finished turn ended (null while it is live): its status; "
            "reason: a cancel's (interrupted, rolled_back, expired, or the canceller's "
            "words) or a failure's classification; by: the turn that interrupted or rolled "
            "it back; actor: who cancelled it",
            "required": ["status", "reason", "by", "actor"],
            "properties": {
                "status": {"type": "string", "enum": list(RunStatus.values)},
                "reason": {"type": ["string", "null"]},
                "by": {"type": ["string", "null"], "format": "uuid"},
                "actor": {"type": ["string", "null"]},
            },
        },
        "Turn": {
            "type": "object",
            "description": "one run of a session",
            "required": ["id", "kind", "status", "payloads", "ended", "links"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "kind": {"type": "string"},
                "status": {"type": "string", "enum": list(RunStatus.values)},
                "place": {"type": ["integer", "null"]},
                "payloads": {
                    "type": "array",
                    "description": "what was sent, in order: the payloads merged into the "
                    "turn (on_busy merge), or its one payload",
                    "items": {},
                },
                "result": {"description": "the handler's result, once succeeded"},
                "ended": {"$ref": _REF + "Ending"},
                "interrupted_id": {"type": ["string", "null"], "format": "uuid"},
                "created_at": nullable_time,
                "started_at": nullable_time,
                "finished_at": nullable_time,
                "links": {
                    "type": "object",
                    "required": ["run"],
                    "properties": {"run": {"type": "string"}},
                },
            },
        },
        "Session": {
            "type": "object",
            "required": ["session_id", "turns", "active", "pending", "usage", "links"],
            "properties": {
                "session_id": {"type": "string"},
                "turns": {
                    "type": "array",
                    "description": "the page's turns in submit order (the newest page "
                    "unless before says otherwise)",
                    "items": {"$ref": _REF + "Turn"},
                },
                "active": {"oneOf": [{"$ref": _REF + "Turn"}, {"type": "null"}]},
                "pending": {
                    "type": "array",
                    "description": "the pending turns in the order they will be queued "
                    "(at most 100)",
                    "items": {"$ref": _REF + "Turn"},
                },
                "pending_more": {"type": "boolean"},
                "usage": {
                    "$ref": _REF + "Usage",
                    "description": "what the session's runs recorded, their trees included",
                },
                "links": {
                    "type": "object",
                    "required": ["self", "stream", "older"],
                    "properties": {
                        "self": {"type": "string"},
                        "stream": {"type": "string"},
                        "older": {
                            "type": ["string", "null"],
                            "description": "the page of the turns before these (null: "
                            "these start at the first)",
                        },
                    },
                },
            },
        },
        "SessionLine": {
            "type": ["object", "null"],
            "description": "the run's session now: its active run, then its pending runs "
            "in the order they will be queued (null for a run in no session)",
            "required": ["active", "pending"],
            "properties": {
                "active": {
                    "oneOf": [{"$ref": _REF + "SessionTurn"}, {"type": "null"}],
                },
                "pending": {"type": "array", "items": {"$ref": _REF + "SessionTurn"}},
            },
        },
        "Event": {
            "type": "object",
            "required": ["id", "type", "lease_epoch", "data", "created_at"],
            "properties": {
                "id": {"type": "integer"},
                "type": {"type": "string"},
                "lease_epoch": {"type": "integer"},
                "data": {},
                "created_at": nullable_time,
            },
        },
        "EventPage": {
            "type": "object",
            "required": ["events", "next"],
            "properties": {
                "events": {"type": "array", "items": {"$ref": _REF + "Event"}},
                "next": {"type": ["string", "null"], "description": "URL of the next page"},
            },
        },
        "Problem": {
            "type": "object",
            "required": ["type", "title", "status"],
            "properties": {
                "type": {"type": "string", "enum": [PROBLEM_BASE + s for s in PROBLEMS]},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string"},
                "instance": {"type": "string"},
                "errors": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "pointer": {"type": "string"},
                            "detail": {"type": "string"},
                        },
                    },
                },
            },
        },
    }


def document() -> dict[str, JSON]:
    """The OpenAPI document for this deployment."""
    limit = get_settings().API_MAX_BODY_BYTES
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runqueue",
            "version": "1",
            "description": "Submit and read runs. Errors are RFC 9457 problem details; "
            f"request bodies are limited to {limit} bytes.",
        },
        "security": [{"bearerAuth": []}, {"sessionAuth": []}],
        "paths": {
            _path("runs"): {
                "post": {
                    "operationId": "submitRun",
                    "summary": "Create a run, or deliver input to the session's waiting run",
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": True,
                            "description": KEY_RULE,
                            "schema": {"type": "string", "pattern": KEY_PATTERN},
                        }
                    ],
                    "requestBody": {"required": True, "content": _json("SubmitRun")},
                    "responses": {
                        "201": {
                            "description": "run created: queued, pending behind the "
                            "session's active run (on_busy enqueue or steer), or interrupting "
                            "it (or a replay of that)",
                            "headers": _LOCATION | _OUTCOME | _REPLAYED,
                            "content": _json("Run"),
                        },
                        "202": {
                            "description": "input delivered to the session's waiting run, "
                            "or the payload merged into its turn not started yet (on_busy "
                            "merge)",
                            "headers": _LOCATION | _OUTCOME | _REPLAYED,
                            "content": _json("Run"),
                        },
                        **_problems(400, 401, 403, 405, 409, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("event"): {
                "post": {
                    "operationId": "receiveEvent",
                    "summary": "Record an inbound event: start its triggers' runs, end the "
                    "waits it matches",
                    "description": "The body (a JSON object) is the event's data, recorded "
                    "for the caller's tenant once per key: the Idempotency-Key header, or the "
                    "body member RUNQUEUE['EVENT_KEY_FIELDS'] names. Only the names in "
                    "RUNQUEUE['API_EVENTS'] are accepted (404 event-not-accepted), bodies up "
                    "to EVENT_MAX_BYTES (413); an event name with a signature check "
                    "(EVENT_VERIFIERS) needs a body that verifies (401 "
                    "event-signature-invalid). The same key again with the same data is a "
                    "replay (200, Idempotent-Replayed); with other data 422 "
                    "idempotency-key-reused.",
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                        },
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "description": KEY_RULE,
                            "schema": {"type": "string", "pattern": KEY_PATTERN},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "responses": {
                        "201": {"description": "recorded", "content": _json("EventReceived")},
                        "200": {
                            "description": "a replay of an event recorded before",
                            "headers": _REPLAYED,
                            "content": _json("EventReceived"),
                        },
                        **_problems(400, 401, 404, 405, 411, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("run"): {
                "get": {
                    "operationId": "getRun",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": {"description": "the run", "content": _json("Run")},
                        **_problems(401, 404, 405, 500, 503),
                    },
                }
            },
            _path("run-events"): {
                "get": {
                    "operationId": "listRunEvents",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "after",
                            "in": "query",
                            "description": "return events with an id greater than this",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": MAX_EVENTS_PAGE_SIZE,
                            },
                        },
                    ],
                    "responses": {
                        "200": {"description": "a page of events", "content": _json("EventPage")},
                        **_problems(400, 401, 404, 405, 500, 503),
                    },
                }
            },
            _path("run-stream"): {
                "get": {
                    "operationId": "streamRunEvents",
                    "summary": "Server-Sent Events: the run's events after the cursor, then "
                    "each new one as it commits, until a terminal event",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "description": "resume after this message's id: (wins over "
                            "after); a cursor not on this server's history (a failover lost "
                            "it) replays the run after a stream.reset message",
                            "schema": {
                                "type": "string",
                                "pattern": "^[0-9]{1,19}([.][0-9a-z]{1,13})?$",
                            },
                        },
                        {
                            "name": "after",
                            "in": "query",
                            "description": "start after this event id",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "the stream: one message per event, id: the "
                            "event id, event: its type, data: the event as JSON",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        "204": {"description": "the run is finished and nothing follows"},
                        **_problems(400, 401, 404, 405, 429, 500, 503),
                    },
                }
            },
            _path("run-cancel"): {
                "post": {
                    "operationId": "cancelRun",
                    "parameters": [_RUN_ID],
                    "requestBody": {"required": False, "content": _json("CancelRun")},
                    "responses": {
                        "200": {"description": "the cancelled run", "content": _json("Run")},
                        **_problems(401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("run-pause"): {
                "post": {
                    "operationId": "pauseRun",
                    "description": "Pause a run (tree: and every run below it): not claimed, "
                    "its start deadline frozen; a running one is given back at its next step. "
                    "Pausing a paused run again changes nothing.",
                    "parameters": [_RUN_ID],
                    "requestBody": {"required": False, "content": _json("PauseRun")},
                    "responses": {
                        "200": {"description": "the run", "content": _json("Run")},
                        **_problems(401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("run-resume"): {
                "post": {
                    "operationId": "resumeRun",
                    "description": "Resume a paused run (tree: and every run below it).",
                    "parameters": [_RUN_ID],
                    "requestBody": {"required": False, "content": _json("PauseRun")},
                    "responses": {
                        "200": {"description": "the run", "content": _json("Run")},
                        **_problems(401, 403, 404, 405, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("run-signal"): {
                "post": {
                    "operationId": "signalRun",
                    "description": "Send a signal to a run of your tenant; the body (any JSON, "
                    "or none) is its data, the run's input when a wait for that name ends.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                        },
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": {}}},
                    },
                    "responses": {
                        "202": {"description": "delivered or kept", "content": _json("Signalled")},
                        **_problems(400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("run-input"): {
                "post": {
                    "operationId": "answerRun",
                    "summary": "Answer a run waiting for the user, whatever its session",
                    "description": "The body (any JSON, or none for null) is the run's input, "
                    "as the payload of a submit to its session would be: the run is queued "
                    "again and its handler resumes with it as ctx.input. Its question is "
                    "wait.question in the run. 409 run-not-waiting-for-user once answered. "
                    "An Idempotency-Key (optional) makes a retry safe, as on a submit: the "
                    "same answer again is the first response with Idempotent-Replayed: true; "
                    "the key with another answer or run is 422 idempotency-key-reused.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "description": KEY_RULE,
                            "schema": {"type": "string", "pattern": KEY_PATTERN},
                        },
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": {}}},
                    },
                    "responses": {
                        "202": {
                            "description": "the answer is the run's input; the run is queued "
                            "(or a replay of that)",
                            "headers": _LOCATION | _REPLAYED,
                            "content": _json("Run"),
                        },
                        **_problems(400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("run-steps"): {
                "get": {
                    "operationId": "getRunSteps",
                    "description": "The run's recorded steps in order: each model request "
                    "and response, each tool call with its arguments, outcome and approval.",
                    "parameters": [
                        _RUN_ID,
                        {"name": "after", "in": "query", "schema": {"type": "integer"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    ],
                    "responses": {
                        "200": {"description": "a page of steps", "content": _json("Steps")},
                        **_problems(400, 401, 404, 405, 500, 503),
                    },
                }
            },
            _path("run-tool-decision"): {
                "post": {
                    "operationId": "decideTool",
                    "description": "Approve, edit, reject or respond to a tool call awaiting "
                    "approval; the run resumes. The same decision again answers as the first "
                    "(Idempotent-Replayed); another is 409 tool-not-awaiting-approval.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "seq",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer", "minimum": 0},
                        },
                    ],
                    "requestBody": {"required": True, "content": _json("ToolDecision")},
                    "responses": {
                        "200": {
                            "description": "the decided call and its run",
                            "headers": _REPLAYED,
                            "content": _json("Decided"),
                        },
                        **_problems(400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 500, 503),
                    },
                }
            },
            _path("session"): {
                "get": {
                    "operationId": "getSession",
                    "summary": "A session of your tenant: its newest turns in submit order "
                    "with how each ended, its active run, its line and its usage",
                    "parameters": [
                        _SESSION_ID,
                        {
                            "name": "limit",
                            "in": "query",
                            "description": "turns per page (default 20)",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                        {
                            "name": "before",
                            "in": "query",
                            "description": "the turns before this cursor (a page's "
                            "links.older carries it)",
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {
                        "200": {"description": "the session", "content": _json("Session")},
                        **_problems(400, 401, 404, 405, 500, 503),
                    },
                }
            },
            _path("session-stream"): {
                "get": {
                    "operationId": "streamSessionEvents",
                    "summary": "Server-Sent Events: every turn's events of a session in "
                    "order, each naming its run, then each new one as it commits, the next "
                    "turns' too; closed after STREAM_MAX_SECONDS (resume with Last-Event-ID)",
                    "parameters": [
                        _SESSION_ID,
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "description": "resume after this message's id: (wins over "
                            "after), across turns; a cursor not on this server's history or "
                            "not of this session starts again after a stream.reset message",
                            "schema": {"type": "string", "pattern": _SESSION_CURSOR},
                        },
                        {
                            "name": "after",
                            "in": "query",
                            "description": "the same cursor as Last-Event-ID",
                            "schema": {"type": "string", "pattern": _SESSION_CURSOR},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "the stream: one message per event, id: the "
                            "cursor, event: its type, data: the event as JSON with its run_id; "
                            "without a cursor, from the newest finished turn and the live ones",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **_problems(400, 401, 404, 405, 429, 500, 503),
                    },
                }
            },
            **openapi_schedules.paths(_problems),
        },
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer"},
                "sessionAuth": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
        "x-problem-types": {
            PROBLEM_BASE + slug: {"status": status, "title": title}
            for slug, (status, title) in PROBLEMS.items()
        },
    }


@csrf_exempt
def openapi_json(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3 document (public: it describes, it reveals no data)."""
    if request.method not in ("GET", "HEAD"):
        return ApiError("method-not-allowed", "Use GET.", headers={"Allow": "GET, HEAD"}).render(
            request
        )
    return JsonResponse(document(), json_dumps_params={"indent": 1})
