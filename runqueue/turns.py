"""A turn's payloads: the payloads ``on_busy="merge"`` joined into one
run, as the run stores them and a handler reads them back
(docs/decisions.md, "Busy sessions: on_busy")."""

from __future__ import annotations

from runqueue.types import JSON

#: A merged payload: ``{MERGED_KEY: [first payload, second, ...]}``.
MERGED_KEY = "merged"


def merged_payload(first: JSON, then: JSON) -> dict[str, list[JSON]]:
    """``first`` with ``then`` joined: ``{"merged": [first, then]}``, or
    ``then`` added to a payload merged already."""
    return {MERGED_KEY: [*turn_payloads(first), then]}


def turn_payloads(payload: JSON) -> list[JSON]:
    """The payloads of the submits a run answers, in order: the payloads a
    merge joined, or the run's own payload alone."""
    if (
        isinstance(payload, dict)
        and set(payload) == {MERGED_KEY}
        and isinstance(payload[MERGED_KEY], list)
    ):
        return list(payload[MERGED_KEY])
    return [payload]
