"""The OpenAPI document's schedules: the paths and schemas of
``/api/schedules/``, built from the same constants the endpoints check.
Apart from the other resources so that each reads whole; the package
assembles them."""

from __future__ import annotations

from runqueue.api.openapi.parts import (
    NULLABLE_TIME,
    UUID,
    answer,
    idempotency_key,
    json_content,
    operation,
    page,
    parameter,
    replayed,
)
from runqueue.api.parsing import MAX_PAUSE_REASON, MAX_SCHEDULE_PAGE, SCHEDULE_PAGE
from runqueue.conf import ON_BUSY
from runqueue.models import PRIORITY_MAX, Overlap, PriorityClass
from runqueue.submission.rules import TEXT_LIMITS
from runqueue.types import JSON

_NO_NUL = "^[^\\u0000]+$"
_ID = parameter("schedule_id", "path", UUID)


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
    one = {"200": answer("the schedule", "Schedule")}
    writes = (400, 401, 404, 405, 413, 415, 422, 429, 500, 503)
    return {
        "schedules": {
            "post": operation(
                "createSchedule",
                [idempotency_key(required=True)],
                {
                    "201": answer(
                        "made (or a replay of that)",
                        "Schedule",
                        headers={"Location": {"schema": {"type": "string"}}, **replayed("create")},
                    ),
                },
                (400, 401, 405, 409, 411, 413, 415, 422, 429, 500, 503),
                summary="Make a schedule: a cron in a time zone, or once at run_at",
                description="Each tick submits a run of kind with payload, as POST /api/runs/ "
                "would (the same kinds, the same priority ceiling; principal "
                "schedule:api:<id>); with session_id, a turn of that session submitted with "
                "on_busy (default enqueue). A token owns at most "
                "RUNQUEUE['API_SCHEDULES_PER_TOKEN'] schedules that can still fire (409 "
                "schedule-limit-reached). The Idempotency-Key works as on a submit.",
                body={"required": True, "content": json_content("CreateSchedule")},
            ),
            "get": operation(
                "listSchedules",
                [
                    parameter("session_id", "query", {"type": "string"}),
                    parameter("kind", "query", {"type": "string"}),
                    parameter(
                        "after", "query", UUID, description="the last id of the previous page"
                    ),
                    parameter(
                        "limit",
                        "query",
                        {"type": "integer", "minimum": 1, "maximum": MAX_SCHEDULE_PAGE},
                        description=f"schedules per page (default {SCHEDULE_PAGE})",
                    ),
                ],
                {"200": answer("a page", "SchedulePage")},
                (400, 401, 405, 500, 503),
                summary="The schedules of your tenant made over the API or by handlers, "
                "sorted by id",
            ),
        },
        "schedule": {
            "get": operation("getSchedule", [_ID], one, (401, 404, 405, 500, 503)),
            "delete": operation(
                "deleteSchedule",
                [_ID],
                {"204": {"description": "deleted"}},
                (401, 404, 405, 429, 500, 503),
                summary="Delete the schedule and its ticks; its runs stay as they are",
            ),
        },
        "schedule-pause": {
            "post": operation(
                "pauseSchedule",
                [_ID],
                one,
                writes,
                summary="Stop firing; ticks while paused are not caught up (a paused "
                "schedule: 200, as the first time)",
                body=_pause_body(),
            )
        },
        "schedule-resume": {
            "post": operation(
                "resumeSchedule",
                [_ID],
                one,
                writes,
                summary="Fire again from now on; a one-shot whose time passed fires now (an "
                "active schedule: 200)",
                body=_pause_body(),
            )
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
                "id": UUID,
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
