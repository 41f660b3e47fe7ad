"""The queue's own housekeeping, run as maintenance-class runs.

Each job lives in a session of its own, so however many workers schedule it,
at most one is queued or running at a time (the session constraint).
"""

from __future__ import annotations

from typing import Any

from runqueue.errors import ActiveRunConflict
from runqueue.models import PriorityClass

PRUNE_KEYS = "runqueue.prune_idempotency_keys"
PRUNE_RUNS = "runqueue.prune_terminal_runs"
TENANT = "runqueue"


def schedule() -> list[Any]:
    """Submit each housekeeping run unless one is already active."""
    from runqueue.submission import submit

    submitted = []
    for kind in (PRUNE_KEYS, PRUNE_RUNS):
        try:
            sub = submit(
                kind=kind,
                tenant=TENANT,
                session_id=f"housekeeping:{kind}",
                priority=PriorityClass.MAINTENANCE,
            )
        except ActiveRunConflict:
            continue
        submitted.append(sub.run)
    return submitted
