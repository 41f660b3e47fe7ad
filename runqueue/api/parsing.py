"""Request parsing for the API: bounded body read, content type, JSON,
the Idempotency-Key header, and the submit body's schema.

Each step raises ApiError with its own problem type, in the order of
RELIABILITY §2.4: size (413), content type (415), JSON (400), key (400),
then the body's schema (422). What a submission may hold is
``runqueue.submission.rules``'s to say; this module adds what only the
API refuses (unknown members, reserved kinds) and the header's syntax.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from decimal import Decimal
from typing import Any, NoReturn, NotRequired, TypedDict, cast

from django.http import HttpRequest
from django.urls import reverse

from runqueue.api.errors import ApiError, FieldError, validation_failed
from runqueue.conf import RESERVED_KIND_PREFIXES, get_settings
from runqueue.limits import REASON_MAX_LENGTH
from runqueue.submission.fields import API_FIELDS, API_NAMES, SubmitField
from runqueue.submission.rules import KEY_RULE as BARE_KEY_RULE
from runqueue.submission.rules import (
    CheckedSubmission,
    Problem,
    check_submission,
    is_idempotency_key,
)
from runqueue.types import JSON
from runqueue.validation import text_problem
from runqueue.webhooks import addresses

#: RFC 8941 sf-string: printable ASCII, with \" and \\ the only escapes.
_SF_STRING = re.compile(r'^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$')
KEY_RULE = f"{BARE_KEY_RULE}, optionally as a quoted sf-string"

#: The members of ``POST /api/runs/`` (runqueue.submission.fields).
SUBMIT_FIELDS = API_NAMES
MAX_REASON = REASON_MAX_LENGTH
#: A schedule's pause reason (its column's length), and a page of schedules.
MAX_PAUSE_REASON = 500
SCHEDULE_PAGE = 50
MAX_SCHEDULE_PAGE = 200
#: The longest integer a body may hold (Python's own bound on converting one).
MAX_DIGITS = sys.get_int_max_str_digits() or 4300


class SubmitBody(TypedDict):
    """The body of ``POST /api/runs/`` (all but kind optional)."""

    kind: str
    payload: NotRequired[JSON]
    session_id: NotRequired[str | None]
    priority: NotRequired[int | str]
    scheduled_for: NotRequired[str | None]
    budget: NotRequired[BudgetBody | None]
    start_within: NotRequired[float | None]
    spend_cap: NotRequired[float | None]
    on_busy: NotRequired[str | None]
    debounce: NotRequired[float | None]
    webhook: NotRequired[str | None]


class BudgetBody(TypedDict):
    """The run's first model call: a budget's key and the tokens it reserves."""

    key: str
    tokens: int


class SubmitArgs(TypedDict):
    """Validated arguments for ``runqueue.submit``."""

    kind: str
    payload: JSON
    session_id: str | None
    priority: int
    scheduled_for: dt.datetime | None
    budget: tuple[str, int] | None
    start_within: float | None
    spend_cap: Decimal | None
    on_busy: str | None
    debounce: float | None
    webhook: str | None


def read_body(request: HttpRequest, limit: int | None = None) -> bytes:
    """Read at most the configured limit (or ``limit``, if smaller) + 1
    bytes; 413 beyond the limit.

    Content-Length alone is not trusted (it may be missing or understated
    under ASGI): the read itself is bounded, and never uses request.body.
    """
    limit = min(get_settings().API_MAX_BODY_BYTES, limit or sys.maxsize)
    too_large = ApiError(
        "payload-too-large",
        f"The request body is larger than {limit} bytes.",
        extensions={"max_bytes": limit},
    )
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    if not declared and chunked and "wsgi.input" in request.META:
        data = _read_chunked(request, limit + 1)
    else:
        data = request.read(limit + 1)
    if len(data) > limit:
        raise too_large
    return data


def _read_chunked(request: HttpRequest, most: int) -> bytes:
    """A chunked body (no Content-Length): Django reads none of it, so read
    the server's input, which ends at the last chunk when the server says so
    (``wsgi.input_terminated``, as gunicorn does). Without that: 411."""
    stream = request.META["wsgi.input"]
    if not request.META.get("wsgi.input_terminated"):
        raise ApiError(
            "length-required",
            "This server cannot read a chunked request body: send a Content-Length.",
        )
    parts: list[bytes] = []
    size = 0
    while size < most:
        part = stream.read(most - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


def parse_json(request: HttpRequest, data: bytes, *, optional: bool = False) -> JSON:
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
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant, parse_int=_int)
    except _LongNumber as exc:
        raise ApiError(
            "malformed-json",
            f"A number in the request body has {exc.digits} digits; "
            f"at most {MAX_DIGITS} are read.",
        ) from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError("malformed-json", "The request body is not valid UTF-8 JSON.") from exc
    except RecursionError as exc:
        raise ApiError("malformed-json", "The request body is nested too deeply.") from exc


class _LongNumber(ValueError):
    def __init__(self, digits: int) -> None:
        self.digits = digits
        super().__init__(f"{digits} digits")


def _int(text: str) -> int:
    """An integer of the body; Python refuses to convert one of more than
    ``MAX_DIGITS`` digits, which must not read as "not valid JSON"."""
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _LongNumber(digits)
    return int(text)


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def idempotency_key(request: HttpRequest, what: str = "run") -> str:
    """The Idempotency-Key: required, one header, bare or as an sf-string."""
    raw = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if raw is None:
        raise ApiError(
            "idempotency-key-missing",
            f"POST {request.path} needs an Idempotency-Key header (a UUID is a good key), "
            f"so a retry cannot create a second {what}.",
            headers={"Link": f'<{reverse("runqueue-api:openapi")}>; rel="describedby"'},
        )
    return key_value(raw)


def key_value(raw: str) -> str:
    """An Idempotency-Key's value, bare or as an sf-string; 400 if malformed."""
    value = raw.strip(" \t")
    if value.startswith('"'):
        match = _SF_STRING.match(value)
        if match is None:
            raise _invalid_key(value)
        value = re.sub(r"\\(.)", r"\1", match.group(1))
    elif "," in value:
        raise _invalid_key(value)
    if not is_idempotency_key(value):
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


def submit_args(body: object) -> SubmitArgs:
    """Check the submit body against its schema; 422 listing every problem.

    The kind's handler is looked up later, by ``runqueue.submit``: the API
    admits a kind (``RUNQUEUE["API_KINDS"]``) before that.
    """
    if not isinstance(body, dict):
        raise validation_failed([{"pointer": "", "detail": "the body must be a JSON object"}])
    errors: list[FieldError] = [
        {"pointer": pointer(name), "detail": "unknown field"}
        for name in sorted(set(body) - SUBMIT_FIELDS)
    ]
    checked_here = [f for f in API_FIELDS if not f.api_form_only]
    checked, problems = check_submission(
        **{f.name: body.get(f.name, f.api_default) for f in checked_here},
        from_json=True,
        registered_only=False,
    )
    # The URL's form only: which endpoint signs it depends on the caller's
    # tenant, and submit checks that (and the SSRF rule) with it.
    if (webhook := body.get("webhook")) is not None:
        try:
            addresses.parse(webhook)
        except addresses.UrlRefused as exc:
            problems.append(Problem("/webhook", str(exc)))
    kind_problems = [p for p in problems if p.pointer == "/kind"]
    if "kind" not in body:
        kind_problems = [Problem("/kind", "is required")]
    elif not kind_problems and body["kind"].startswith(RESERVED_KIND_PREFIXES):
        kind_problems = [Problem("/kind", f"kind {body['kind']!r} is reserved")]
    errors.extend(
        {"pointer": p.pointer, "detail": p.detail}
        for p in kind_problems + [p for p in problems if p.pointer != "/kind"]
    )
    if errors or checked is None:
        raise validation_failed(errors)
    args = {f.name: _passed_on(f, body, checked) for f in API_FIELDS}
    return cast(SubmitArgs, args)


def _passed_on(field: SubmitField, body: dict, checked: CheckedSubmission) -> object:
    """What the API hands ``submit()`` for a member: the checked value; the
    body's own for one only its form was checked here (submit checks the
    rest with the tenant); None for one the body left out whose default is
    the kind's or the project's (submit applies it, as for any caller)."""
    if field.api_form_only:
        return body.get(field.name)
    if field.api_own_only and body.get(field.name) is None:
        return None
    return getattr(checked, field.name)


def event_key(request: HttpRequest, name: str, body: dict[str, JSON]) -> str:
    """An inbound event's key: its Idempotency-Key header, else the body
    member ``RUNQUEUE["EVENT_KEY_FIELDS"]`` names for the event (a string or
    an integer: a provider's event id); 400 without either, 422 for a
    member that is no key."""
    raw = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if raw is not None:
        return key_value(raw)
    member = get_settings().EVENT_KEY_FIELDS.get(name)
    if member is None or member not in body:
        where = f" or a {member!r} member in the body" if member else ""
        raise ApiError(
            "idempotency-key-missing",
            f"An event needs an Idempotency-Key header{where} (the sender's event id is a "
            "good key), so a repeated delivery is recognised.",
        )
    value = body[member]
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not is_idempotency_key(text):
        raise validation_failed(
            [{"pointer": pointer(member), "detail": f"the event's key must be {BARE_KEY_RULE}"}]
        )
    return text


def cancel_cascade(body: object) -> bool:
    """The optional ``{"cascade": false}`` of a cancel (default true: the
    run's descendants are cancelled with it); 422 if not a boolean."""
    if not isinstance(body, dict) or "cascade" not in body:
        return True
    if not isinstance(body["cascade"], bool):
        raise validation_failed([{"pointer": "/cascade", "detail": "must be true or false"}])
    return body["cascade"]


def cancel_reason(body: object) -> str:
    """The optional ``{"reason": "..."}`` of a cancel; 422 if malformed."""
    if body is None:
        return ""
    if not isinstance(body, dict) or set(body) - {"reason", "cascade"}:
        raise validation_failed(
            [
                {
                    "pointer": "",
                    "detail": 'the body must be {"reason": "<text>", "cascade": true} or empty',
                }
            ]
        )
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise validation_failed(
            [{"pointer": "/reason", "detail": f"must be a string of at most {MAX_REASON}"}]
        )
    if (detail := text_problem(reason)) is not None:
        raise validation_failed([{"pointer": "/reason", "detail": detail}])
    return reason


def pause_request(body: object) -> tuple[str, bool]:
    """The optional ``{"reason": "...", "tree": false}`` of a pause or a
    resume: (reason, tree); 422 if malformed."""
    if body is None:
        return "", False
    if not isinstance(body, dict) or set(body) - {"reason", "tree"}:
        raise validation_failed(
            [
                {
                    "pointer": "",
                    "detail": 'the body must be {"reason": "<text>", "tree": false} or empty',
                }
            ]
        )
    if not isinstance(body.get("tree", False), bool):
        raise validation_failed([{"pointer": "/tree", "detail": "must be true or false"}])
    return cancel_reason({"reason": body.get("reason", "")}), body.get("tree", False)


def pointer(name: str) -> str:
    """A JSON Pointer to a top-level member (RFC 6901 escaping)."""
    return "/" + name.replace("~", "~0").replace("/", "~1")


#: The members a tool call's decision may have.
_DECISION_MEMBERS = {"decision", "reason", "arguments", "result"}


def tool_decision(body: object) -> dict[str, Any]:
    """A decision's body, ``{"decision": ..., "reason"|"arguments"|"result"}``,
    as ``runqueue.decide_tool``'s keywords; 422 naming what is not a member
    (the service checks the values: its InvalidArgument is the 422's
    detail)."""
    if not isinstance(body, dict) or "decision" not in body:
        raise validation_failed(
            [{"pointer": "/decision", "detail": "required: approve, edit, reject or respond"}]
        )
    if extra := sorted(set(body) - _DECISION_MEMBERS):
        raise validation_failed(
            [{"pointer": pointer(name), "detail": "is not a member"} for name in extra]
        )
    if not isinstance(body.get("reason", ""), str):
        raise validation_failed([{"pointer": "/reason", "detail": "must be a string"}])
    return {name: body[name] for name in _DECISION_MEMBERS if name in body}
