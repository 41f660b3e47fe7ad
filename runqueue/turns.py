"""A turn's messages, as the queue records them: the payloads
``on_busy="merge"`` (or ``"debounce"``) joined into one run, whether a
pending turn is a steer for the running one, and what ``"latest"``
replaced (docs/decisions/sessions.md, "Busy sessions: on_busy").

The run's ``turn`` column holds it (NULL for a run that is one message, as
most are); the payload stays the first message's, so a client payload
shaped like a merge (``{"merged": [...]}``) is never read as one.
"""

from __future__ import annotations

from typing import Any

from runqueue.types import JSON

#: ``turn["payloads"]``: every message of a joined turn, oldest first.
PAYLOADS = "payloads"
#: ``turn["steer"]``: a pending turn sent with ``on_busy="steer"``: the
#: running turn may read it (``ctx.steers()``); if it does not, it runs
#: as the session's next turn.
STEER = "steer"


def turn_payloads(run: Any) -> list[JSON]:
    """The payloads of the submits a run answers, in order: the messages
    joined into it, or its own payload alone. ``run``: a ``Run`` (or
    anything with ``payload`` and ``turn``)."""
    turn = getattr(run, "turn", None)
    if isinstance(turn, dict) and isinstance(turn.get(PAYLOADS), list):
        return list(turn[PAYLOADS])
    return [run.payload]


def joined(run: Any, then: JSON) -> dict[str, JSON]:
    """``run``'s turn with the message ``then`` joined at its end."""
    turn = dict(run.turn) if isinstance(run.turn, dict) else {}
    turn[PAYLOADS] = [*turn_payloads(run), then]
    return turn


def is_steer(run: Any) -> bool:
    turn = getattr(run, "turn", None)
    return isinstance(turn, dict) and bool(turn.get(STEER))
