"""``ctx.emit``: a handler's progress event, appended through the fence.

A fenced worker's emit writes nothing (the fence UPDATE matches no row), so
a stream never shows progress from a worker that lost the run. The data is
kept in the event log like every event, so it is bounded
(``EMIT_MAX_BYTES`` of JSON, 16 KiB by default): emit progress, not bulk
output, and batch fast token streams (one event per 100 ms or so: each emit
is a committed transaction).
"""

from __future__ import annotations

import json
import re

from runqueue import leases
from runqueue.conf import get_settings
from runqueue.types import JSON
from runqueue.validation import json_text_problem

#: Types runqueue itself appends; a handler's event may not pose as one
#: (a fake ``run.succeeded`` would end every stream of the run).
RESERVED_PREFIXES = ("run.", "tool.")
_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


def check(event_type: str, data: object) -> None:
    """Raise ValueError, naming the problem, for an event emit must refuse."""
    if not isinstance(event_type, str) or not _TYPE.match(event_type):
        raise ValueError(
            f"event type {event_type!r} must be 1-64 characters of letters, digits and "
            "'_.:-', starting with a letter or digit"
        )
    if event_type.startswith(RESERVED_PREFIXES):
        raise ValueError(
            f"event type {event_type!r} is reserved: runqueue's own events start with "
            + " or ".join(RESERVED_PREFIXES)
        )
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"event data must be a JSON object (a dict), got {type(data).__name__}")
    try:
        text = json.dumps(data or {}, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"event data is not JSON-serialisable: {exc}") from exc
    limit = get_settings().EMIT_MAX_BYTES
    if len(text.encode()) > limit:
        raise ValueError(
            f"event data is {len(text.encode())} bytes as JSON; the limit is {limit} "
            "(RUNQUEUE['EMIT_MAX_BYTES'])"
        )
    problem = json_text_problem(data or {})
    if problem is not None:
        raise ValueError(f"event data {problem}")


def emit(lease: leases.Lease, event_type: str, data: dict[str, JSON] | None = None) -> bool:
    """Append the event if this worker still owns the run; False once fenced.
    Raises ValueError (nothing written) for a bad type or data."""
    check(event_type, data)
    return leases.append_event(lease, event_type, data)
