"""What PostgreSQL can store: checked before a write, not discovered by it.

A submission's rules (``runqueue.submission.rules``) and every jsonb write
call these, so a value one refuses the others refuse too, with the same
words. PostgreSQL stores text as UTF-8 and
refuses NUL in ``text`` and ``jsonb``; a Python ``str`` may hold an unpaired
surrogate (a JSON body may escape one: ``"\\ud800"``), which is not Unicode
text and has no UTF-8 form. A ``datetime`` is stored in UTC, and Python
cannot convert one whose UTC instant falls outside years 1-9999 (PostgreSQL's
own range, 4713 BC to 294276 AD, is wider).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from decimal import Decimal

from runqueue.limits import COST_DIGITS, COST_PLACES, MAX_WAIT_SECONDS, MIN_DEADLINE_SECONDS

NUL = "must not contain NUL characters"
SURROGATE = "must be valid Unicode text (it holds an unpaired surrogate such as \\ud800)"
TIME_RANGE = "must fall between 0001-01-01 and 9999-12-31 in UTC"


def text_problem(value: str) -> str | None:
    """Why PostgreSQL cannot store this string, or None if it can."""
    if "\x00" in value:
        return NUL
    if not _utf8(value):
        return SURROGATE
    return None


def json_text_problem(value: object) -> str | None:
    """The first unstorable string (member name or value) in a JSON value.

    Iterative, so nesting depth is no concern; says where, as a JSON Pointer.
    """
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        pointer, item = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{problem}, at '{_short(pointer)}'" if pointer else problem
        elif isinstance(item, dict):
            for key, child in item.items():
                step = f"{pointer}/{_escape(key)}" if isinstance(key, str) else pointer
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    return f"{problem}, in a member name at '{_short(pointer) or '/'}'"
                stack.append((step, child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{pointer}/{i}", child) for i, child in enumerate(item))
    return None


def json_text(value: object, what: str) -> str:
    """``value`` as the JSON text jsonb stores; ValueError saying why not
    (not JSON, NaN or infinity, or a string PostgreSQL refuses)."""
    text, problem = json_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {problem}")
    return text


def check_state(state: object) -> None:
    """ValueError unless a handler's state can be stored: the one check of
    the state a checkpoint, a wait (for the user, children, a signal, a
    time or a budget) or a turn's end saves, made before anything is
    written, by the runtime and by the lease writes alike."""
    json_text(state, "checkpoint state")


#: ``json.dumps(value, allow_nan=False)``'s encoder, made once (dumps makes
#: one per call for a non-default option: half its cost on a small payload).
_STRICT = json.JSONEncoder(allow_nan=False)


def json_problem(value: object) -> tuple[str, str | None]:
    """``value`` as JSON text, and why jsonb cannot store it (or None).

    The one JSON check: a submission's payload and every jsonb a worker
    writes go through it. The text is ``""`` when it cannot be made.
    """
    try:
        text = _STRICT.encode(value)
    except (TypeError, ValueError) as exc:
        return "", f"must be JSON-serialisable: {exc}"
    # json.dumps escapes NUL as \u0000 and a lone surrogate as \udXXX: text
    # without either holds no string PostgreSQL refuses, so only the rare
    # text that has one pays for the walk (a literal backslash-u in a string
    # is escaped too and only looks like one).
    if "\\u0000" not in text and "\\ud" not in text:
        return text, None
    return text, json_text_problem(value)


def as_utc(value: dt.datetime) -> dt.datetime:
    """An aware datetime converted to UTC; ValueError (with the rule) if
    it is naive or its UTC instant is outside Python's years 1-9999."""
    try:
        offset = value.utcoffset()
    except (ValueError, TypeError) as exc:  # a tzinfo that misbehaves
        raise ValueError(f"has an unusable time zone: {exc}") from exc
    if offset is None:
        raise ValueError("must be timezone-aware")
    try:
        # In UTC: PostgreSQL also refuses offsets beyond +-15:59 that Python allows.
        return value.astimezone(dt.UTC)
    except OverflowError as exc:
        raise ValueError(TIME_RANGE) from exc


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escape(key: str) -> str:
    """A JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _short(pointer: str, limit: int = 200) -> str:
    return pointer if len(pointer) <= limit else pointer[: limit - 1] + "…"


def duration(value: object, *, from_json: bool = False) -> tuple[float | None, str | None]:
    """A run deadline's length in seconds (``start_within``, ``max_duration``),
    or why not: a finite number of seconds (or, from Python, a timedelta)
    from a microsecond, the resolution a deadline is stored at (``1e-320``
    rounded to zero there: the run expired or failed at once), to
    ``MAX_WAIT_SECONDS``. None stays None (no limit)."""
    if value is None:
        return None, None
    if isinstance(value, dt.timedelta) and not from_json:
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(min(value, 2 * MAX_WAIT_SECONDS))  # no OverflowError for a huge int
    else:
        expected = "a number of seconds" if from_json else "a number of seconds or a timedelta"
        got = type(value).__name__
        return None, f"must be {expected}, got {got}"
    if math.isnan(seconds) or math.isinf(seconds) or seconds <= 0:
        return None, f"must be a positive number of seconds, got {value!r}"
    if seconds < MIN_DEADLINE_SECONDS:
        return None, (
            f"must be at least {MIN_DEADLINE_SECONDS:.6f} seconds (a microsecond, the "
            f"resolution deadlines are stored at), got {value!r}"
        )
    if seconds > MAX_WAIT_SECONDS:
        return None, f"must be at most {MAX_WAIT_SECONDS:.0f} seconds (100 years), got {value!r}"
    return seconds, None


#: An amount of money as stored (usage costs, spend caps): 12 places.
COST_QUANTUM = Decimal(1).scaleb(-COST_PLACES)
MAX_COST = Decimal(10) ** (COST_DIGITS - COST_PLACES) - COST_QUANTUM


def money(value: object, what: str) -> Decimal:
    """``value`` as a stored amount: a non-negative finite number (int,
    float or Decimal), rounded to 12 places; ValueError. A string is refused
    from Python as the API refuses it from JSON: one rule for both."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ValueError(f"{what} must be a number >= 0, got {value!r}")
    try:
        amount = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except decimal.InvalidOperation:
        raise ValueError(f"{what} must be a number >= 0, got {value!r}") from None
    if not amount.is_finite() or amount < 0 or amount > MAX_COST:
        raise ValueError(f"{what} must be a finite number from 0 to {MAX_COST}, got {value!r}")
    return amount.quantize(COST_QUANTUM, rounding=decimal.ROUND_HALF_UP)
