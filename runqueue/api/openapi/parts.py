"""What the resources' parts of the OpenAPI document are made of: a
schema's reference, a route's path as the document writes it, an operation
with its parameters and answers, the problem answers with their schema and
types, and the schemas, parameters and headers several operations share.
Apart from the resources' modules (runs, events, steps, sessions,
schedules), which all use it, and from the package, which puts them
together."""

from __future__ import annotations

from django.urls import reverse

from runqueue.api.errors import PROBLEM_BASE, PROBLEM_CONTENT_TYPE, PROBLEMS
from runqueue.api.parsing import KEY_RULE
from runqueue.submission.rules import KEY_PATTERN
from runqueue.types import JSON

REF = "#/components/schemas/"
NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
UUID = {"type": "string", "format": "uuid"}
#: The body of an answer that is an event stream (a run's, a session's).
EVENT_STREAM = {"text/event-stream": {"schema": {"type": "string"}}}

#: The path parameters of each route, by its name or its name's first word
#: (``run-events``: ``run``).
_PARAMETERS: dict[str, tuple[str, ...]] = {
    "runs": (),
    "run": ("run_id",),
    "run-signal": ("run_id", "name"),
    "run-tool-decision": ("run_id", "seq"),
    "event": ("name",),
    "session": ("session_id",),
    "schedules": (),
    "schedule": ("schedule_id",),
}


def path(name: str) -> str:
    """Route ``runqueue-api:<name>``'s URL as the document writes it, each
    path parameter in braces (``/api/runs/{run_id}/cancel/``): true to
    where the API is mounted."""
    first = name if name in _PARAMETERS else name.partition("-")[0]
    placeholders = {p: p.replace("_", "").upper() for p in _PARAMETERS[first]}
    url = reverse(f"runqueue-api:{name}", kwargs=placeholders)
    for parameter, placeholder in placeholders.items():
        url = url.replace(placeholder, "{" + parameter + "}")
    return url


def parameter(
    name: str,
    where: str,
    schema: JSON,
    *,
    description: str | None = None,
    required: bool | None = None,
) -> JSON:
    """An operation's parameter ``in`` ``where`` (path, query or header): a
    path's is always required; the others say so only when ``required`` is
    given."""
    declared: dict[str, JSON] = {"name": name, "in": where}
    if where == "path":
        required = True
    if required is not None:
        declared["required"] = required
    if description is not None:
        declared["description"] = description
    declared["schema"] = schema
    return declared


RUN_ID = parameter("run_id", "path", UUID)


def operation(
    operation_id: str,
    parameters: list[JSON],
    answers: dict[str, JSON],
    codes: tuple[int, ...],
    *,
    summary: str | None = None,
    description: str | None = None,
    body: JSON = None,
) -> JSON:
    """An operation: its id, what it says it does, its parameters, its
    request body (if any), and its answers, then its problem answers with
    these status ``codes``."""
    declared: dict[str, JSON] = {"operationId": operation_id}
    if summary is not None:
        declared["summary"] = summary
    if description is not None:
        declared["description"] = description
    declared["parameters"] = parameters
    if body is not None:
        declared["requestBody"] = body
    declared["responses"] = {**answers, **problems(*codes)}
    return declared


def answer(description: str, schema: str, *, headers: dict[str, JSON] | None = None) -> JSON:
    """An answer with a JSON body of the named schema (and ``headers``)."""
    declared: dict[str, JSON] = {"description": description}
    if headers is not None:
        declared["headers"] = headers
    declared["content"] = json_content(schema)
    return declared


def json_content(schema: str) -> dict[str, JSON]:
    """A JSON body of the named schema."""
    return {"application/json": {"schema": {"$ref": REF + schema}}}


def problems(*codes: int) -> dict[str, JSON]:
    """The problem answers with these status codes, each naming its types."""
    return {
        str(code): {
            "description": ", ".join(
                slug for slug, (status, _title) in PROBLEMS.items() if status == code
            ),
            "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": REF + "Problem"}}},
        }
        for code in codes
    }


def page(member: str, item: str, *, next_described: bool = True) -> JSON:
    """A page of a list: its ``item`` schemas under ``member``, and the URL
    of the next page (null on the last), described unless ``next_described``
    is false (the steps' page, as it always was)."""
    after: dict[str, JSON] = {"type": ["string", "null"]}
    if next_described:
        after["description"] = "URL of the next page"
    return {
        "type": "object",
        "required": [member, "next"],
        "properties": {member: {"type": "array", "items": {"$ref": REF + item}}, "next": after},
    }


def idempotency_key(*, required: bool) -> JSON:
    """The Idempotency-Key header a write takes (a submit, a create: required)."""
    return parameter(
        "Idempotency-Key",
        "header",
        {"type": "string", "pattern": KEY_PATTERN},
        description=KEY_RULE,
        required=required,
    )


def replayed(what: str) -> dict[str, JSON]:
    """The header of an answer that replays an earlier ``what`` with the same key."""
    return {
        "Idempotent-Replayed": {
            "schema": {"type": "string", "enum": ["true"]},
            "description": f"present on a replay of an earlier {what} with the same key",
        }
    }


def schemas() -> dict[str, JSON]:
    """Problem: the body of every error."""
    return {
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


def problem_types() -> dict[str, JSON]:
    """``x-problem-types``: each problem's type URI, status and title."""
    return {
        PROBLEM_BASE + slug: {"status": status, "title": title}
        for slug, (status, title) in PROBLEMS.items()
    }
