"""The OpenAPI document's events: an inbound event received
(``/api/events/<name>/``), a run's events by the page and as a stream, and
their schemas. Apart from the other resources so that each reads whole; the
package assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    NULLABLE_TIME,
    RUN_ID,
    idempotency_key,
    json_content,
    page,
    problems,
    replayed,
)
from runqueue.conf import MAX_EVENTS_PAGE_SIZE
from runqueue.types import JSON


def schemas() -> dict[str, JSON]:
    """EventReceived, Event and EventPage."""
    return {
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
        "Event": {
            "type": "object",
            "required": ["id", "type", "lease_epoch", "data", "created_at"],
            "properties": {
                "id": {"type": "integer"},
                "type": {"type": "string"},
                "lease_epoch": {"type": "integer"},
                "data": {},
                "created_at": NULLABLE_TIME,
            },
        },
        "EventPage": page("events", "Event"),
    }


def paths() -> dict[str, JSON]:
    """By route name: an inbound event, a run's events and their stream."""
    return {
        "event": {
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
                    idempotency_key(required=False),
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "201": {"description": "recorded", "content": json_content("EventReceived")},
                    "200": {
                        "description": "a replay of an event recorded before",
                        "headers": replayed("request"),
                        "content": json_content("EventReceived"),
                    },
                    **problems(400, 401, 404, 405, 411, 413, 415, 422, 429, 500, 503),
                },
            }
        },
        "run-events": {
            "get": {
                "operationId": "listRunEvents",
                "parameters": [
                    RUN_ID,
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
                    "200": {
                        "description": "a page of events",
                        "content": json_content("EventPage"),
                    },
                    **problems(400, 401, 404, 405, 500, 503),
                },
            }
        },
        "run-stream": {
            "get": {
                "operationId": "streamRunEvents",
                "summary": "Server-Sent Events: the run's events after the cursor, then "
                "each new one as it commits, until a terminal event",
                "parameters": [
                    RUN_ID,
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
                    **problems(400, 401, 404, 405, 429, 500, 503),
                },
            }
        },
    }
