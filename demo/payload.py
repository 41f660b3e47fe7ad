"""Reading a demo handler's payload: every field checked, every time and size capped.

The demo's kinds are open to API tokens while the demo is on, so a payload
is hostile until read here. A bad field fails the run permanently with a
message that names the field and what it accepts: retrying cannot fix a
payload, and a run that sleeps as long as its payload says must not hold a
worker's slot for longer than the cap.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from runqueue.errors import PermanentError


def fields(kind: str, payload: Any, allowed: Collection[str]) -> dict[str, Any]:
    """The payload as an object holding only ``allowed`` fields (an empty one for null)."""
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise PermanentError(
            f"{kind}: the payload must be a JSON object, got {type(payload).__name__}"
        )
    unknown = sorted(set(payload) - set(allowed))
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise PermanentError(
            f"{kind}: payload field {unknown[0][:64]!r} is not one it takes ({takes})"
        )
    return payload


def integer(payload: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An integer field within low..high."""
    value = payload.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PermanentError(
            f"payload field {name!r} must be an integer from {low} to {high}, got {_show(value)}"
        )
    return value


def number(
    payload: dict[str, Any], name: str, default: float | None, low: float, high: float
) -> float | None:
    """A number field within low..high (``default`` when absent or null)."""
    value = payload.get(name)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise PermanentError(
            f"payload field {name!r} must be a number from {low:g} to {high:g}, got {_show(value)}"
        )
    return float(value)


def text(
    payload: dict[str, Any],
    name: str,
    default: str,
    max_length: int,
    choices: Collection[str] = (),
) -> str:
    """A string field of at most ``max_length`` characters (one of ``choices`` if given)."""
    value = payload.get(name, default)
    if not isinstance(value, str) or len(value) > max_length:
        raise PermanentError(
            f"payload field {name!r} must be a string of at most {max_length} characters,"
            f" got {_show(value)}"
        )
    if choices and value not in choices:
        raise PermanentError(
            f"payload field {name!r} must be one of {', '.join(choices)}, got {_show(value)}"
        )
    return value


def flag(payload: dict[str, Any], name: str) -> bool:
    """A true/false field (false when absent)."""
    value = payload.get(name, False)
    if not isinstance(value, bool):
        raise PermanentError(f"payload field {name!r} must be true or false, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    """The offending value, short: a 10 KB string must not become a 10 KB message."""
    if isinstance(value, str):
        return repr(value[:40] + "…") if len(value) > 40 else repr(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return repr(value)
