"""The OpenAPI document's schedules: the paths and schemas of
``/api/schedules/``, built from the same constants the endpoints check.
Apart from the other resources so that each reads whole; the package
assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    NULLABLE_TIME,
    idempotency_key,
    json_content,
    page,
    problems,
    replayed,
)
from runqueue.api.parsing import MAX_PAUSE_REASON, MAX_SCHEDULE_PAGE, SCHEDULE_PAGE
from runqueue.conf import ON_BUSY
from runqueue.models import PRIORITY_MAX, Overlap, PriorityClass
from runqueue.submission.rules import TEXT_LIMITS
from runqueue.types import JSON

_NO_NUL = "^[^\\u0000]+$"
_ID = {
    "name": "schedule_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}


def _pause_body() -> dict[str, JSON]:
    return {
        "required": False,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"reason": {"type": "string", "maxLength": MAX_PAUSE_REASON}},
                }
            }
        },
    }


def paths() -> dict[str, JSON]:
    """By route name: the schedules, one schedule, its pause and resume."""
    one = {"200": {"description": "the schedule", "content": json_content("Schedule")}}
    return {
        "schedules": {
            "post": {
                "operationId": "createSchedule",
                "summary": "Make a schedule: a cron in a time zone, or once at run_at",
                "description": "Each tick submits a run of kind with payload, as "
                "POST /api/runs/ would (the same kinds, the same priority ceiling; "
                "principal schedule:api:<id>); with session_id, a turn of that session "
                "submitted with on_busy (default enqueue). A token owns at most "
                "RUNQUEUE['API_SCHEDULES_PER_TOKEN'] schedules that can still fire (409 "
                "schedule-limit-reached). The Idempotency-Key works as on a submit.",
                "parameters": [idempotency_key(required=True)],
                "requestBody": {"required": True, "content": json_content("CreateSchedule")},
                "responses": {
                    "201": {
                        "description": "made (or a replay of that)",
                        "headers": {
                            "Location": {"schema": {"type": "string"}},
                            **replayed("create"),
                        },
                        "content": json_content("Schedule"),
                    },
                    **problems(400, 401, 405, 409, 411, 413, 415, 422, 429, 500, 503),
                },
            },
            "get": {
                "operationId": "listSchedules",
                "summary": "The schedules of your tenant made over the API or by handlers, "
                "sorted by id",
                "parameters": [
                    {"name": "session_id", "in": "query", "schema": {"type": "string"}},
                    {"name": "kind", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "after",
                        "in": "query",
                        "description": "the last id of the previous page",
                        "schema": {"type": "string", "format": "uuid"},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "description": f"schedules per page (default {SCHEDULE_PAGE})",
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_SCHEDULE_PAGE},
                    },
                ],
                "responses": {
                    "200": {"description": "a page", "content": json_content("SchedulePage")},
                    **problems(400, 401, 405, 500, 503),
                },
            },
        },
        "schedule": {
            "get": {
                "operationId": "getSchedule",
                "parameters": [_ID],
                "responses": {**one, **problems(401, 404, 405, 500, 503)},
            },
            "delete": {
                "operationId": "deleteSchedule",
                "summary": "Delete the schedule and its ticks; its runs stay as they are",
                "parameters": [_ID],
                "responses": {
                    "204": {"description": "deleted"},
                    **problems(401, 404, 405, 429, 500, 503),
                },
            },
        },
        "schedule-pause": {
            "post": {
                "operationId": "pauseSchedule",
                "summary": "Stop firing; ticks while paused are not caught up (a paused "
                "schedule: 200, as the first time)",
                "parameters": [_ID],
                "requestBody": _pause_body(),
                "responses": {**one, **problems(400, 401, 404, 405, 413, 415, 422, 429, 500, 503)},
            }
        },
        "schedule-resume": {
            "post": {
                "operationId": "resumeSchedule",
                "summary": "Fire again from now on; a one-shot whose time passed fires now "
                "(an active schedule: 200)",
                "parameters": [_ID],
                "requestBody": _pause_body(),
                "responses": {**one, **problems(400, 401, 404, 405, 413, 415, 422, 429, 500, 503)},
            }
        },
    }


def schemas(kinds: list[str]) -> dict[str, JSON]:
    """CreateSchedule, Schedule and SchedulePage."""
    text = {"type": ["string", "null"]}
    return {
        "CreateSchedule": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kind"],
            "description": "exactly one of cron and run_at",
            "properties": {
                "kind": {"type": "string", "enum": kinds},
                "payload": {"description": "any JSON, as a submit's"},
                "priority": {
                    "oneOf": [
                        {"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX},
                        {"type": "string", "enum": list(PriorityClass.slugs())},
                    ],
                    "description": "at most the caller's ceiling, which is the default",
                },
                "cron": {
                    "type": "string",
                    "description": "five fields: minute hour day-of-month month day-of-week",
                },
                "timezone": {
                    "type": "string",
                    "description": "an IANA name for cron (default UTC); not with run_at",
                },
                "run_at": {
                    "type": "string",
                    "format": "date-time",
                    "description": "once, at this RFC 3339 time with an offset, in the future",
                },
                "session_id": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": TEXT_LIMITS["session_id"],
                    "pattern": _NO_NUL,
                },
                "on_busy": {
                    "type": ["string", "null"],
                    "enum": [*ON_BUSY, None],
                    "description": "with session_id: what a tick does when the session is "
                    "busy, as on a submit (default enqueue: the next turn); a tick refused "
                    "(reject, or the line full) is recorded busy, not retried",
                },
                "overlap": {
                    "type": "string",
                    "enum": list(Overlap.values),
                    "description": "a tick while the last tick's run is active (default skip)",
                },
                "runs_may_schedule": {
                    "type": "boolean",
                    "description": "its runs (and their children) may call ctx.schedule "
                    "(default false)",
                },
            },
        },
        "Schedule": {
            "type": "object",
            "required": ["id", "url", "kind", "state", "next_fire_at", "last_run"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "url": {"type": "string"},
                "kind": {"type": "string"},
                "payload": {},
                "priority": {"type": "integer"},
                "cron": text,
                "timezone": text,
                "run_at": NULLABLE_TIME,
                "session_id": text,
                "on_busy": text,
                "overlap": {"type": "string"},
                "runs_may_schedule": {"type": "boolean"},
                "state": {"type": "string", "enum": ["active", "paused", "done"]},
                "paused_at": NULLABLE_TIME,
                "pause_reason": {"type": "string"},
                "next_fire_at": NULLABLE_TIME,
                "last_run": {**text, "description": "the URL of its last tick's run"},
                "source": {"type": "string", "enum": ["api", "handler"]},
                "created_by": {"type": "string"},
                "created_at": NULLABLE_TIME,
            },
        },
        "SchedulePage": page("schedules", "Schedule"),
    }
