"""The OpenAPI 3.1 document of the API, built from the URLconf and registry,
and served at ``/api/openapi.json``.

Paths come from ``reverse`` (true to where the API is mounted); the ``kind``
enum lists the kinds this deployment can run. The problem types are listed
under ``x-problem-types``. Each resource's paths and schemas are declared in
a module of this package (runs, events, steps, sessions, schedules; what they
share in parts); this one puts them together, in the document's order.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from runqueue import registry
from runqueue.api.errors import ApiError
from runqueue.api.openapi import events, parts, runs, schedules, sessions, steps
from runqueue.conf import RESERVED_KIND_PREFIXES, get_settings
from runqueue.types import JSON

#: The order the document lists its paths (by route name) and its schemas
#: in, as it always has: a client comparing two versions sees only what
#: changed. One a module adds that is not named here comes after these.
PATHS = (
    "runs",
    "event",
    "run",
    "run-events",
    "run-stream",
    "run-cancel",
    "run-pause",
    "run-resume",
    "run-signal",
    "run-input",
    "run-steps",
    "run-tool-decision",
    "session",
    "session-stream",
    "schedules",
    "schedule",
    "schedule-pause",
    "schedule-resume",
)
SCHEMAS = (
    "CreateSchedule",
    "Schedule",
    "SchedulePage",
    "SubmitRun",
    "CancelRun",
    "PauseRun",
    "EventReceived",
    "Signalled",
    "Wait",
    "Failure",
    "Usage",
    "Run",
    "Step",
    "Steps",
    "ToolDecision",
    "Decided",
    "SessionTurn",
    "Ending",
    "Turn",
    "Session",
    "SessionLine",
    "Event",
    "EventPage",
    "Problem",
)


def _kinds() -> list[str]:
    """The kinds the API may submit (and schedule) in this deployment."""
    allowed = set(get_settings().API_KINDS)
    return [
        k for k in registry.kinds() if k in allowed and not k.startswith(RESERVED_KIND_PREFIXES)
    ]


def _in_order(found: dict[str, JSON], order: tuple[str, ...]) -> dict[str, JSON]:
    """``found`` in ``order``; any it does not name after those, as found."""
    first = {name: found[name] for name in order if name in found}
    return first | {name: value for name, value in found.items() if name not in first}


def document() -> dict[str, JSON]:
    """The OpenAPI document for this deployment."""
    limit = get_settings().API_MAX_BODY_BYTES
    kinds = _kinds()
    paths = {
        **runs.paths(),
        **events.paths(),
        **steps.paths(),
        **sessions.paths(),
        **schedules.paths(),
    }
    schemas = {
        **schedules.schemas(kinds),
        **runs.schemas(kinds),
        **events.schemas(),
        **steps.schemas(),
        **sessions.schemas(),
        **parts.schemas(),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "runqueue",
            "version": "1",
            "description": "Submit and read runs. Errors are RFC 9457 problem details; "
            f"request bodies are limited to {limit} bytes.",
        },
        "security": [{"bearerAuth": []}, {"sessionAuth": []}],
        "paths": {parts.path(name): item for name, item in _in_order(paths, PATHS).items()},
        "components": {
            "schemas": _in_order(schemas, SCHEMAS),
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer"},
                "sessionAuth": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
        "x-problem-types": parts.problem_types(),
    }


@csrf_exempt
def openapi_json(request: HttpRequest) -> HttpResponse:
    """The OpenAPI 3 document (public: it describes, it reveals no data)."""
    if request.method not in ("GET", "HEAD"):
        return ApiError("method-not-allowed", "Use GET.", headers={"Allow": "GET, HEAD"}).render(
            request
        )
    return JsonResponse(document(), json_dumps_params={"indent": 1})
