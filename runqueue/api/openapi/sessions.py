"""The OpenAPI document's sessions: a session read and its stream, and the
schemas of a session, its turns and a run's line in it. Apart from the
other resources so that each reads whole; the package assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    EVENT_STREAM,
    NULLABLE_TIME,
    REF,
    UUID,
    answer,
    operation,
    parameter,
)
from runqueue.models import RunStatus
from runqueue.submission.rules import TEXT_LIMITS
from runqueue.types import JSON

_SESSION_ID = parameter(
    "session_id",
    "path",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": TEXT_LIMITS["session_id"],
        "pattern": "^[^/\\u0000]+$",
    },
    description="the session's id, in the caller's tenant (one holding '/' cannot be named "
    "in a path)",
)
_SESSION_CURSOR = "^[0-9a-f]{32}:[0-9]{1,19}([.][0-9a-z]{1,13})?$"


def schemas() -> dict[str, JSON]:
    """SessionTurn, Ending, Turn, Session and SessionLine."""
    return {
        "SessionTurn": {
            "type": "object",
            "required": ["id", "status", "place"],
            "properties": {
                "id": UUID,
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
                "id": UUID,
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
                "ended": {"$ref": REF + "Ending"},
                "interrupted_id": {"type": ["string", "null"], "format": "uuid"},
                "created_at": NULLABLE_TIME,
                "started_at": NULLABLE_TIME,
                "finished_at": NULLABLE_TIME,
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
                    "items": {"$ref": REF + "Turn"},
                },
                "active": {"oneOf": [{"$ref": REF + "Turn"}, {"type": "null"}]},
                "pending": {
                    "type": "array",
                    "description": "the pending turns in the order they will be queued "
                    "(at most 100)",
                    "items": {"$ref": REF + "Turn"},
                },
                "pending_more": {"type": "boolean"},
                "usage": {
                    "$ref": REF + "Usage",
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
                    "oneOf": [{"$ref": REF + "SessionTurn"}, {"type": "null"}],
                },
                "pending": {"type": "array", "items": {"$ref": REF + "SessionTurn"}},
            },
        },
    }


def paths() -> dict[str, JSON]:
    """By route name: a session and its stream."""
    return {
        "session": {
            "get": operation(
                "getSession",
                [
                    _SESSION_ID,
                    parameter(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": 100},
                        description="turns per page (default 20)",
                    ),
                    parameter(
                        "before",
                        "query",
                        {"type": "string"},
                        description="the turns before this cursor (a page's links.older "
                        "carries it)",
                    ),
                ],
                {"200": answer("the session", "Session")},
                (400, 401, 404, 405, 500, 503),
                summary="A session of your tenant: its newest turns in submit order with how "
                "each ended, its active run, its line and its usage",
            )
        },
        "session-stream": {
            "get": operation(
                "streamSessionEvents",
                [
                    _SESSION_ID,
                    parameter(
                        "Last-Event-ID",
                        "header",
                        {"type": "string", "pattern": _SESSION_CURSOR},
                        description="resume after this message's id: (wins over after), "
                        "across turns; a cursor not on this server's history or not of this "
                        "session starts again after a stream.reset message",
                    ),
                    parameter(
                        "after",
                        "query",
                        {"type": "string", "pattern": _SESSION_CURSOR},
                        description="the same cursor as Last-Event-ID",
                    ),
                ],
                {
                    "200": {
                        "description": "the stream: one message per event, id: the cursor, "
                        "event: its type, data: the event as JSON with its run_id; without a "
                        "cursor, from the newest finished turn and the live ones",
                        "content": EVENT_STREAM,
                    },
                },
                (400, 401, 404, 405, 429, 500, 503),
                summary="Server-Sent Events: every turn's events of a session in order, each "
                "naming its run, then each new one as it commits, the next turns' too; closed "
                "after STREAM_MAX_SECONDS (resume with Last-Event-ID)",
            )
        },
    }
