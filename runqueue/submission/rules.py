"""A submission's rules, written once: what ``submit()`` and the HTTP API accept.

``check_submission`` looks at every member of a submission and returns
every problem, each with the JSON Pointer of the member it is about:
``submit()``, ``submit_in_transaction()`` and ``submit_many()`` raise the
first (``InvalidSubmission``, or ``UnknownKind``), the API answers 422
listing them all. Limits are read from the model (the columns' lengths and
``PRIORITY_MAX``), never restated, so widening a column widens the rule.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import models

from runqueue import registry
from runqueue.capacity import budgets
from runqueue.conf import ON_BUSY, Settings, get_settings
from runqueue.errors import InvalidSubmission, RunqueueError, UnknownKind
from runqueue.limits import BUDGET_KEY_MAX_LENGTH, BUDGET_TOKENS_MAX, MAX_ATTEMPTS_MAX
from runqueue.models import PRIORITY_MAX, IdempotencyKey, PriorityClass, Run
from runqueue.types import JSON
from runqueue.validation import as_utc, duration, json_problem, money, text_problem


def _max_length(model: type[models.Model], name: str) -> int:
    """The declared length of a text column (every one this module reads has one)."""
    field = model._meta.get_field(name)
    length = getattr(field, "max_length", None)
    if not isinstance(length, int):
        raise TypeError(f"{model.__name__}.{name} has no max_length")
    return length


#: The longest idempotency key: its column's length.
KEY_MAX_LENGTH = _max_length(IdempotencyKey, "key")
_KEY = re.compile(f"[!-~]{{1,{KEY_MAX_LENGTH}}}")  # printable ASCII, no space
#: The key's rule as a JSON Schema pattern and in words.
KEY_PATTERN = f"^{_KEY.pattern}$"
KEY_RULE = f"1-{KEY_MAX_LENGTH} printable ASCII characters without spaces"

#: The text members of a run and the longest value each column holds.
TEXT_LIMITS: dict[str, int] = {
    name: _max_length(Run, name)
    for name in ("kind", "tenant", "principal", "session_id", "concurrency_key")
}

_RFC3339 = "must be an RFC 3339 date-time with a UTC offset, e.g. 2030-01-01T09:00:00Z"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a submission: where (a JSON Pointer) and why."""

    pointer: str
    detail: str
    #: The kind, when the problem is that no handler is registered for it.
    unregistered_kind: str | None = None

    @property
    def field(self) -> str:
        return self.pointer.removeprefix("/")

    def error(self) -> RunqueueError:
        """What ``submit()`` raises for it."""
        if self.unregistered_kind is not None:
            return UnknownKind(self.unregistered_kind)
        return InvalidSubmission(self.field, self.detail)


def unregistered(kind: str) -> Problem:
    """The problem of a kind no handler is registered for."""
    return Problem("/kind", f"no handler is registered for kind {kind!r}", unregistered_kind=kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedSubmission:
    """A submission as runqueue stores it: checked, defaults filled in,
    ``scheduled_for`` in UTC, the payload as the JSON it round-trips to."""

    kind: str
    payload: JSON
    session_id: str | None
    tenant: str
    principal: str
    priority: int
    scheduled_for: dt.datetime | None
    max_attempts: int
    idempotency_key: str | None
    concurrency_key: str
    #: The run's first model call: (budget key, tokens), or None.
    budget: tuple[str, int] | None = None
    #: ``payload`` as the JSON text the run stores (made once, here).
    payload_text: str = ""
    #: Seconds after it is due the run must be claimed by, and the longest
    #: an attempt may run (None: no limit): the submit's, else the kind's
    #: (``@handler``), else the project's (docs/decisions/sessions.md, "Run deadlines").
    start_within: float | None = None
    max_duration: float | None = None
    #: The run tree's spend cap: once the cost its runs record reaches it,
    #: its live runs end (docs/decisions/run-trees.md, "Usage and cost"). None: none.
    spend_cap: Decimal | None = None
    #: What a submit to a busy session does (``ON_BUSY``): the submit's, or
    #: None when it says nothing (then an answer to a run waiting for the
    #: user, else ``RUNQUEUE["SESSION_ON_BUSY"]``: docs/decisions/sessions.md, "Busy
    #: sessions: on_busy").
    on_busy: str | None = None
    #: ``on_busy="debounce"``'s window and longest wait in seconds: the
    #: submit's window, else the kind's (``@handler``); the longest wait the
    #: kind's, else ten windows. None without a window.
    debounce: float | None = None
    debounce_max: float | None = None
    #: The run's own webhook URL and the endpoint whose secret signs it
    #: (``runqueue.webhooks.endpoint_for``), or None.
    webhook: tuple[int, str] | None = None


def check_submission(
    *,
    kind: object,
    payload: object = None,
    session_id: object = None,
    tenant: object = "default",
    principal: object = "",
    priority: object = PriorityClass.INTERACTIVE,
    idempotency_key: object = None,
    scheduled_for: object = None,
    max_attempts: object = None,
    concurrency_key: object = None,
    budget: object = None,
    start_within: object = None,
    max_duration: object = None,
    spend_cap: object = None,
    on_busy: object = None,
    debounce: object = None,
    webhook: object = None,
    from_json: bool = False,
    registered_only: bool = True,
    conf: Settings | None = None,
) -> tuple[CheckedSubmission | None, list[Problem]]:
    """The checked submission (None if any problem), and every problem in
    member order. None means the default for every optional member.

    ``from_json``: the values come from a JSON document (the API's body):
    types are named as JSON names them, ``priority`` may be a class's slug
    and ``scheduled_for`` an RFC 3339 string. ``registered_only``: a kind
    without a handler is a problem (the API admits a kind before submitting).
    ``conf``: the settings to check under (the current ones by default; the
    settings' own schedules are checked while the settings are parsed).
    """
    conf = get_settings() if conf is None else conf
    problems: list[Problem] = []

    def report(field: str, detail: str | None) -> None:
        if detail is not None:
            problems.append(Problem(f"/{field}", detail))

    def text(field: str, value: object) -> str:
        """``value`` as a string, its problem reported ("" when it has one)."""
        report(field, text_member(field, value, from_json=from_json))
        return value if isinstance(value, str) else ""

    def optional_text(field: str, value: object) -> str | None:
        return None if value is None else text(field, value)

    kind_text = text("kind", kind)
    if registered_only and not problems and not registry.is_registered(kind_text):
        problems.append(unregistered(kind_text))
    count = len(problems)
    tenant_text = text("tenant", tenant)
    tenant_valid = len(problems) == count
    principal_text = text("principal", principal)
    session_text = optional_text("session_id", session_id)
    concurrency_text = tenant_text
    if concurrency_key is not None or tenant_valid:
        # The tenant's problem is not reported twice for its default.
        concurrency_text = text(
            "concurrency_key", tenant if concurrency_key is None else concurrency_key
        )
    report("idempotency_key", idempotency_key_problem(idempotency_key))
    key_text = idempotency_key if isinstance(idempotency_key, str) else None
    priority_value, detail = _priority(priority, from_json=from_json)
    report("priority", detail)
    attempts = conf.MAX_ATTEMPTS if max_attempts is None else max_attempts
    report("max_attempts", _max_attempts_problem(attempts))
    attempts_value = attempts if isinstance(attempts, int) else 0
    scheduled_value, detail = _scheduled_for(scheduled_for, from_json=from_json)
    report("scheduled_for", detail)
    payload = {} if payload is None else payload
    payload_text, detail = _payload(payload, conf.MAX_PAYLOAD_BYTES)
    report("payload", detail)
    budget_value, detail = _budget(budget, from_json=from_json)
    report("budget", detail)
    start_value, detail = duration(start_within, from_json=from_json)
    report("start_within", detail)
    duration_value, detail = duration(max_duration, from_json=from_json)
    report("max_duration", detail)
    cap_value, detail = _spend_cap(spend_cap, from_json=from_json)
    report("spend_cap", detail)
    report("on_busy", on_busy_problem(on_busy, from_json=from_json))
    debounce_value, detail = duration(debounce, from_json=from_json)
    report("debounce", detail)
    if (
        detail is None
        and on_busy == "debounce"
        and debounce_value is None
        and registry.options(kind_text).debounce is None
    ):
        report("debounce", "on_busy debounce needs a window: debounce=, or the kind's")
    webhook_value = None
    if webhook is not None and not problems:
        # Last, and only for an otherwise valid submission: it reads the
        # endpoints and resolves the host.
        webhook_value, detail = _webhook(webhook, tenant_text)
        report("webhook", detail)
    if problems:
        return None, problems
    return CheckedSubmission(
        kind=kind_text,
        payload=json.loads(payload_text),
        session_id=session_text,
        tenant=tenant_text,
        principal=principal_text,
        priority=priority_value,
        scheduled_for=scheduled_value,
        max_attempts=attempts_value,
        idempotency_key=key_text,
        concurrency_key=concurrency_text,
        budget=budget_value,
        payload_text=payload_text,
        start_within=_first(
            start_value, registry.options(kind_text).start_within, conf.START_WITHIN_SECONDS
        ),
        max_duration=_first(
            duration_value, registry.options(kind_text).max_duration, conf.MAX_DURATION_SECONDS
        ),
        spend_cap=cap_value,
        on_busy=None if on_busy is None else str(on_busy),
        webhook=webhook_value,
        **_debounce(kind_text, debounce_value),
    ), problems


def require(result: tuple[CheckedSubmission | None, list[Problem]]) -> CheckedSubmission:
    """``check_submission``'s submission, or its first problem raised
    (nothing is written); a declared budget must exist and its call fit a
    whole window. What ``submit()``, ``submit_many()`` and a spawn accept."""
    checked, problems = result
    if checked is None:
        raise problems[0].error()
    if checked.budget is not None and (detail := budgets.problem(*checked.budget)):
        raise InvalidSubmission("budget", detail)
    return checked


class BatchChecks:
    """``require(check_submission(...))`` for the requests of one
    ``submit_many`` call: every member but the payload is checked once per
    distinct combination of values (a fan-out repeats its kind, tenant and
    options), the payload of every request. The same errors, raised for
    the same requests: a combination seen before passed every check but
    the payload's, which is the last one."""

    def __init__(self, names: Sequence[str]) -> None:
        self._conf = get_settings()
        #: ``require``'s values are one per name, in this order.
        self._names = tuple(names)
        self._at = self._names.index("payload")
        #: the other members' values and their types -> the checked fields
        self._passed: dict[tuple[object, ...], dict[str, object]] = {}

    def require(self, values: Sequence[Any]) -> CheckedSubmission:
        """The checked submission of ``values`` (one per name)."""
        at = self._at
        others = (*values[:at], *values[at + 1 :])
        # Types are part of the key: True == 1 and 1.0 == 1, but a check
        # may refuse one and take the other.
        key = (others, tuple(map(type, others)))
        try:
            seen = self._passed.get(key)
        except TypeError:  # an unhashable member (a list for a budget): checked alone
            return self._check(values)
        if seen is None:
            checked = self._check(values)
            self._passed[key] = {
                name: getattr(checked, name)
                for name in CheckedSubmission.__slots__
                if name not in ("payload", "payload_text")
            }
            return checked
        payload = values[at]
        text, detail = _payload({} if payload is None else payload, self._conf.MAX_PAYLOAD_BYTES)
        if detail is not None:
            raise InvalidSubmission("payload", detail)
        # Built from the fields (dataclasses.replace costs three times more).
        return CheckedSubmission(**seen, payload=json.loads(text), payload_text=text)  # type: ignore[arg-type]

    def _check(self, values: Sequence[Any]) -> CheckedSubmission:
        members = dict(zip(self._names, values, strict=True))
        return require(check_submission(**members, conf=self._conf))


def on_busy_problem(value: object, *, from_json: bool = False) -> str | None:
    """Why ``value`` is not an ``on_busy`` policy (None: the default, or one)."""
    if value is None or value in ON_BUSY:
        return None
    shown = _type_name(value, from_json=from_json) if not isinstance(value, str) else repr(value)
    return f"must be one of {', '.join(ON_BUSY)}, got {shown}"


#: Without a longest wait, a debounced turn waits at most this many windows.
DEBOUNCE_MAX_WINDOWS = 10


def _debounce(kind: str, window: float | None) -> dict[str, float | None]:
    """The debounce window and longest wait: the submit's window, else the kind's."""
    options = registry.options(kind)
    window = _first(window, options.debounce)
    if window is None:
        return {"debounce": None, "debounce_max": None}
    longest = _first(options.debounce_max, window * DEBOUNCE_MAX_WINDOWS)
    return {"debounce": window, "debounce_max": max(window, longest or window)}


def _first(*values: float | None) -> float | None:
    """The first that is not None: the submit's, the kind's, the project's."""
    return next((float(v) for v in values if v is not None), None)


def text_member(field: str, value: object, *, from_json: bool = False) -> str | None:
    """Why a run's text member cannot be ``value``: a string, not empty
    (``principal`` may be), no longer than its column, storable."""
    if not isinstance(value, str):
        return f"must be a string, got {_type_name(value, from_json=from_json)}"
    if not value and field != "principal":
        return "must not be empty"
    limit = TEXT_LIMITS[field]
    if len(value) > limit:
        return f"must be at most {limit} characters, got {len(value)}"
    return text_problem(value)


def idempotency_key_problem(value: object) -> str | None:
    """Why ``value`` is not an idempotency key (None: no key, or a good one)."""
    if value is None or (isinstance(value, str) and _KEY.fullmatch(value)):
        return None
    return f"must be {KEY_RULE}"


def is_idempotency_key(value: str) -> bool:
    return _KEY.fullmatch(value) is not None


def _priority(value: object, *, from_json: bool) -> tuple[int, str | None]:
    if from_json and isinstance(value, str):
        if value in PriorityClass.slugs():
            return int(PriorityClass.from_slug(value)), None
        return 0, f"must be an integer or one of {', '.join(PriorityClass.slugs())}"
    if isinstance(value, bool) or not isinstance(value, int):
        if from_json:
            return (
                0,
                f"must be an integer or a class name, got {_type_name(value, from_json=True)}",
            )
        return 0, f"must be an integer, got {value!r}"
    if not 0 <= value <= PRIORITY_MAX:
        return 0, f"must be between 0 and {PRIORITY_MAX}, got {value}"
    return int(value), None


def _max_attempts_problem(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"must be a positive integer, got {value!r}"
    if value > MAX_ATTEMPTS_MAX:
        return f"must be at most {MAX_ATTEMPTS_MAX:,}, got {value}"
    return None


def _scheduled_for(value: object, *, from_json: bool) -> tuple[dt.datetime | None, str | None]:
    """In UTC, or why not: aware, and inside Python's years once in UTC."""
    if value is None:
        return None, None
    if from_json:
        value = _rfc3339(value)
        if value is None:
            return None, _RFC3339
    elif not isinstance(value, dt.datetime):
        return None, f"must be a datetime, got {value!r}"
    try:
        return as_utc(value), None
    except ValueError as exc:
        return None, str(exc)


def _rfc3339(value: object) -> dt.datetime | None:
    """An RFC 3339 date-time with its offset, or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None or "T" not in value.upper():
        return None
    return parsed


def _payload(payload: object, limit: int) -> tuple[str, str | None]:
    """The payload's JSON text, and why it cannot be stored (or None)."""
    text, problem = json_problem(payload)
    # ASCII (json.dumps escapes the rest), so characters are bytes.
    if problem is None and len(text) > limit:
        problem = f"is {len(text)} bytes as JSON, over the {limit}-byte limit"
    return text, problem


def _type_name(value: object, *, from_json: bool) -> str:
    """A value's type, as JSON names it when the value came from JSON."""
    if not from_json:
        return type(value).__name__
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


def _budget(value: object, *, from_json: bool) -> tuple[tuple[str, int] | None, str | None]:
    """A budget declaration's shape: (key, tokens), or from JSON an object
    {"key": ..., "tokens": ...}. Whether the budget exists is submit's to
    check (runqueue.capacity.budgets.declared): it reads the database."""
    if value is None:
        return None, None
    if from_json and isinstance(value, dict):
        if set(value) != {"key", "tokens"}:
            return None, 'must be an object with exactly "key" and "tokens"'
        key, tokens = value["key"], value["tokens"]
    elif not from_json and isinstance(value, tuple | list) and len(value) == 2:
        key, tokens = value
    else:
        expected = 'an object {"key": ..., "tokens": ...}' if from_json else "(key, tokens)"
        return None, f"must be {expected}, got {_type_name(value, from_json=from_json)}"
    if not isinstance(key, str) or not key or len(key) > BUDGET_KEY_MAX_LENGTH:
        return None, f"key must be a 1-{BUDGET_KEY_MAX_LENGTH} character string"
    if (problem := text_problem(key)) is not None:
        return None, f"key {problem}"
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens:
        return None, "tokens must be an integer >= 0"
    if tokens > BUDGET_TOKENS_MAX:
        return None, f"tokens must be at most {BUDGET_TOKENS_MAX}"
    return (key, tokens), None


def _spend_cap(value: object, *, from_json: bool) -> tuple[Decimal | None, str | None]:
    """A spend cap: a number above 0 (from Python also a Decimal or a
    numeric string), in the currency of the prices."""
    if value is None:
        return None, None
    if isinstance(value, bool) or (from_json and not isinstance(value, int | float)):
        return None, f"must be a number above 0, got {_type_name(value, from_json=from_json)}"
    try:
        cap = money(value, "spend_cap")
    except ValueError as exc:
        return None, str(exc).removeprefix("spend_cap ")
    if cap <= 0:
        return None, f"must be above 0, got {value!r}"
    return cap, None


def _webhook(value: object, tenant: str) -> tuple[tuple[int, str] | None, str | None]:
    """A submit's webhook URL: under an active endpoint of the tenant, its
    host public or allowed (docs/operations.md, "Webhooks")."""
    from runqueue.webhooks import addresses, targets  # reads the endpoints

    try:
        endpoint = targets.endpoint_for(value, tenant)
    except addresses.UrlRefused as exc:
        return None, str(exc)
    assert isinstance(value, str)
    return (endpoint.pk, value), None
