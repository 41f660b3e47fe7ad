"""Request parsing for the API: bounded body read, content type, JSON,
the Idempotency-Key header, and the submit body's schema.

Each step raises ApiError with its own problem type, in the order of
RELIABILITY §2.4: size (413), content type (415), JSON (400), key (400),
then the body's schema (422).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any, NotRequired, TypedDict

from django.http import HttpRequest
from django.urls import reverse

from runqueue.api.errors import ApiError, FieldError, validation_failed
from runqueue.conf import get_settings
from runqueue.models import PriorityClass
from runqueue.validation import as_utc, json_text_problem, text_problem

#: RFC 8941 sf-string: printable ASCII, with \" and \\ the only escapes.
_SF_STRING = re.compile(r'^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$')
#: The key itself (as runqueue.submit checks it): 1-255 printable ASCII, no spaces.
_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
KEY_RULE = "1-255 printable ASCII characters without spaces, optionally as a quoted sf-string"

PRIORITY_NAMES: dict[str, int] = {c.name.lower(): int(c) for c in PriorityClass}
MAX_PRIORITY = 32767
#: Kinds the API does not accept: runqueue's own jobs and django.tasks runs,
#: whose payload names code to import; those are submitted from Python only.
RESERVED_KIND_PREFIXES = ("runqueue.", "django.tasks")
SUBMIT_FIELDS = frozenset({"kind", "payload", "session_id", "priority", "scheduled_for"})
MAX_REASON = 1000


class SubmitBody(TypedDict):
    """The body of ``POST /api/runs/`` (all but kind optional)."""

    kind: str
    payload: NotRequired[Any]
    session_id: NotRequired[str | None]
    priority: NotRequired[int | str]
    scheduled_for: NotRequired[str | None]


class SubmitArgs(TypedDict):
    """Validated arguments for ``runqueue.submit``."""

    kind: str
    payload: Any
    session_id: str | None
    priority: int
    scheduled_for: dt.datetime | None


def read_body(request: HttpRequest) -> bytes:
    """Read at most the configured limit + 1 bytes; 413 beyond the limit.

    Content-Length alone is not trusted (it may be missing or understated
    under ASGI): the read itself is bounded, and never uses request.body.
    """
    limit = get_settings().API_MAX_BODY_BYTES
    too_large = ApiError(
        "payload-too-large",
        f"The request body is larger than {limit} bytes.",
        extensions={"max_bytes": limit},
    )
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    data = request.read(limit + 1)
    if len(data) > limit:
        raise too_large
    return data


def parse_json(request: HttpRequest, data: bytes, *, optional: bool = False) -> Any:
    """The body as JSON: 415 unless application/json, 400 if it does not parse.

    With ``optional``, an empty body is None whatever its content type.
    """
    if optional and not data:
        return None
    media_type, _, params = (request.META.get("CONTENT_TYPE") or "").partition(";")
    charset = params.strip().lower().removeprefix("charset=").strip('"') if params else "utf-8"
    if media_type.strip().lower() != "application/json" or charset not in ("utf-8", "utf8"):
        raise ApiError(
            "unsupported-media-type",
            "Send the body as 'Content-Type: application/json' (UTF-8).",
            headers={"Accept-Post": "application/json"},
        )
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError("malformed-json", "The request body is not valid UTF-8 JSON.") from exc
    except RecursionError as exc:
        raise ApiError("malformed-json", "The request body is nested too deeply.") from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def idempotency_key(request: HttpRequest) -> str:
    """The Idempotency-Key: required, one header, bare or as an sf-string."""
    raw = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if raw is None:
        raise ApiError(
            "idempotency-key-missing",
            "POST /api/runs/ needs an Idempotency-Key header (a UUID is a good key), "
            "so a retry cannot create a second run.",
            headers={"Link": f'<{reverse("runqueue-api:openapi")}>; rel="describedby"'},
        )
    value = raw.strip(" \t")
    if value.startswith('"'):
        match = _SF_STRING.match(value)
        if match is None:
            raise _invalid_key(value)
        value = re.sub(r"\\(.)", r"\1", match.group(1))
    elif "," in value:
        raise _invalid_key(value)
    if not _KEY.match(value):
        raise _invalid_key(value)
    return value


def _invalid_key(value: str) -> ApiError:
    # Several headers arrive joined with commas (WSGI and ASGI servers do so).
    detail = (
        "Send exactly one Idempotency-Key header."
        if "," in value
        else f"An Idempotency-Key is {KEY_RULE}."
    )
    return ApiError("idempotency-key-invalid", detail, extensions={"key_format": KEY_RULE})


def submit_args(body: Any) -> SubmitArgs:
    """Check the submit body against its schema; 422 listing every problem."""
    if not isinstance(body, dict):
        raise validation_failed([{"pointer": "", "detail": "the body must be a JSON object"}])
    errors: list[FieldError] = [
        {"pointer": _pointer(name), "detail": "unknown field"}
        for name in sorted(set(body) - SUBMIT_FIELDS)
    ]
    kind = body.get("kind")
    if "kind" not in body:
        errors.append({"pointer": "/kind", "detail": "is required"})
    elif (detail := _text_problem(kind)) is not None:
        errors.append({"pointer": "/kind", "detail": detail})
    elif kind.startswith(RESERVED_KIND_PREFIXES):
        errors.append({"pointer": "/kind", "detail": f"kind {kind!r} is reserved"})
    if (detail := json_text_problem(body.get("payload"))) is not None:
        errors.append({"pointer": "/payload", "detail": detail})
    session_id = body.get("session_id")
    if session_id is not None and (detail := _text_problem(session_id)) is not None:
        errors.append({"pointer": "/session_id", "detail": detail})
    priority, detail = _priority(body.get("priority", int(PriorityClass.INTERACTIVE)))
    if detail is not None:
        errors.append({"pointer": "/priority", "detail": detail})
    scheduled_for, detail = _datetime(body.get("scheduled_for"))
    if detail is not None:
        errors.append({"pointer": "/scheduled_for", "detail": detail})
    if errors:
        raise validation_failed(errors)
    return {
        "kind": kind,
        "payload": body.get("payload", {}),
        "session_id": session_id,
        "priority": priority,
        "scheduled_for": scheduled_for,
    }


def cancel_reason(body: Any) -> str:
    """The optional ``{"reason": "..."}`` of a cancel; 422 if malformed."""
    if body is None:
        return ""
    if not isinstance(body, dict) or set(body) - {"reason"}:
        raise validation_failed(
            [{"pointer": "", "detail": 'the body must be {"reason": "<text>"} or empty'}]
        )
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise validation_failed(
            [{"pointer": "/reason", "detail": f"must be a string of at most {MAX_REASON}"}]
        )
    if (detail := text_problem(reason)) is not None:
        raise validation_failed([{"pointer": "/reason", "detail": detail}])
    return reason


def _pointer(name: str) -> str:
    """A JSON Pointer to a top-level member (RFC 6901 escaping)."""
    return "/" + name.replace("~", "~0").replace("/", "~1")


def _text_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {_json_type(value)}"
    if not 1 <= len(value) <= 255:
        return "must be 1-255 characters"
    return text_problem(value)


def _priority(value: Any) -> tuple[int, str | None]:
    if isinstance(value, str):
        if value in PRIORITY_NAMES:
            return PRIORITY_NAMES[value], None
        return 0, f"must be an integer or one of {', '.join(PRIORITY_NAMES)}"
    if isinstance(value, bool) or not isinstance(value, int):
        return 0, f"must be an integer or a class name, got {_json_type(value)}"
    if not 0 <= value <= MAX_PRIORITY:
        return 0, f"must be between 0 and {MAX_PRIORITY}"
    return value, None


def _datetime(value: Any) -> tuple[dt.datetime | None, str | None]:
    if value is None:
        return None, None
    problem = "must be an RFC 3339 date-time with a UTC offset, e.g. 2030-01-01T09:00:00Z"
    if not isinstance(value, str):
        return None, problem
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None, problem
    if parsed.tzinfo is None or "T" not in value.upper():
        return None, problem
    try:
        return as_utc(parsed), None
    except ValueError as exc:
        return None, str(exc)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
