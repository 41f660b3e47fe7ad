"""What a handler returns to end its turn waiting: for the user
(``ctx.ask_user``), or for its children, a signal, an inbound event or a
time."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from runqueue.types import JSON


@dataclass(frozen=True, slots=True)
class AskUser:
    """Returned by a handler (via ``ctx.ask_user``) to end the turn waiting for input."""

    question: JSON
    state: JSON
    timeout: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """Returned by a handler (via ``ctx.wait_for_children``,
    ``ctx.wait_for_signal``, ``ctx.wait_for_event`` or ``ctx.sleep_until``)
    to end the turn waiting."""

    reason: str
    state: JSON
    name: str = ""
    until: dt.datetime | None = None
    timeout: float | None = None
    #: An event wait's match: a JSON object the event's data must contain.
    match: dict[str, JSON] | None = None
