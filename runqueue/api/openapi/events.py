"""The OpenAPI document's events: an inbound event received
(``/api/events/<name>/``), a run's events by the page and as a stream, and
their schemas. Apart from the other resources so that each reads whole; the
package assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    EVENT_STREAM,
    NULLABLE_TIME,
    RUN_ID,
    UUID,
    answer,
    idempotency_key,
    operation,
    page,
    parameter,
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
                    "items": UUID,
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
            "post": operation(
                "receiveEvent",
                [
                    parameter(
                        "name", "path", {"type": "string", "minLength": 1, "maxLength": 255}
                    ),
                    idempotency_key(required=False),
                ],
                {
                    "201": answer("recorded", "EventReceived"),
                    "200": answer(
                        "a replay of an event recorded before",
                        "EventReceived",
                        headers=replayed("request"),
                    ),
                },
                (400, 401, 404, 405, 411, 413, 415, 422, 429, 500, 503),
                summary="Record an inbound event: start its triggers' runs, end the waits it "
                "matches",
                description="The body (a JSON object) is the event's data, recorded for the "
                "caller's tenant once per key: the Idempotency-Key header, or the body member "
                "RUNQUEUE['EVENT_KEY_FIELDS'] names. Only the names in RUNQUEUE['API_EVENTS'] "
                "are accepted (404 event-not-accepted), bodies up to EVENT_MAX_BYTES (413); an "
                "event name with a signature check (EVENT_VERIFIERS) needs a body that "
                "verifies (401 event-signature-invalid). The same key again with the same data "
                "is a replay (200, Idempotent-Replayed); with other data 422 "
                "idempotency-key-reused.",
                body={
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
            )
        },
        "run-events": {
            "get": operation(
                "listRunEvents",
                [
                    RUN_ID,
                    parameter(
                        "after",
                        "query",
                        {"type": "integer", "minimum": 0},
                        description="return events with an id greater than this",
                    ),
                    parameter(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": MAX_EVENTS_PAGE_SIZE},
                    ),
                ],
                {"200": answer("a page of events", "EventPage")},
                (400, 401, 404, 405, 500, 503),
            )
        },
        "run-stream": {
            "get": operation(
                "streamRunEvents",
                [
                    RUN_ID,
                    parameter(
                        "Last-Event-ID",
                        "header",
                        {"type": "string", "pattern": "^[0-9]{1,19}([.][0-9a-z]{1,13})?$"},
                        description="resume after this message's id: (wins over after); a "
                        "cursor not on this server's history (a failover lost it) replays the "
                        "run after a stream.reset message",
                    ),
                    parameter(
                        "after",
                        "query",
                        {"type": "integer", "minimum": 0},
                        description="start after this event id",
                    ),
                ],
                {
                    "200": {
                        "description": "the stream: one message per event, id: the event id, "
                        "event: its type, data: the event as JSON",
                        "content": EVENT_STREAM,
                    },
                    "204": {"description": "the run is finished and nothing follows"},
                },
                (400, 401, 404, 405, 429, 500, 503),
                summary="Server-Sent Events: the run's events after the cursor, then each new "
                "one as it commits, until a terminal event",
            )
        },
    }
