"""The queue's own housekeeping: what it deletes, the maintenance-class
runs that delete it, and their schedule (the worker calls ``schedule``).

Each job lives in a session of its own, so however many workers schedule it,
at most one is queued or running at a time (the session constraint).
Deleting terminal runs past their retention is the one write to the runs
table outside ``runqueue.submission`` and ``runqueue.leases``: it touches no
live run, so it needs no lease and bumps no epoch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from runqueue.conf import get_settings
from runqueue.errors import ActiveRunConflict
from runqueue.models import TERMINAL_STATUSES, IdempotencyKey, PriorityClass, Run
from runqueue.registry import handler
from runqueue.runtime import RunContext
from runqueue.submission import submit

PRUNE_KEYS = "runqueue.prune_idempotency_keys"
PRUNE_RUNS = "runqueue.prune_terminal_runs"
TENANT = "runqueue"


def schedule() -> list[Run]:
    """Submit each housekeeping run unless one is already active."""
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


@handler(PRUNE_KEYS)
def prune_idempotency_keys(ctx: RunContext) -> dict:
    """Delete expired Idempotency-Keys, in small batches."""
    return {"deleted": delete_expired_keys(batch=1000, heartbeat=ctx.heartbeat)}


@handler(PRUNE_RUNS)
def prune_terminal_runs(ctx: RunContext) -> dict:
    """Delete terminal runs (with their events) past TERMINAL_RUN_RETENTION_SECONDS."""
    retention = get_settings().TERMINAL_RUN_RETENTION_SECONDS
    if retention is None:
        return {"deleted": 0, "retention": None}
    deleted = delete_terminal_runs(
        older_than_seconds=retention, batch=500, heartbeat=ctx.heartbeat
    )
    return {"deleted": deleted, "retention": retention}


def delete_expired_keys(*, batch: int = 1000, heartbeat: Callable[[], bool] | None = None) -> int:
    """Delete expired keys in batches (small transactions, little bloat)."""
    deleted = 0
    while True:
        ids = list(
            IdempotencyKey.objects.filter(expires_at__lte=timezone.now()).values_list(
                "id", flat=True
            )[:batch]
        )
        if not ids:
            return deleted
        deleted += IdempotencyKey.objects.filter(id__in=ids).delete()[0]
        if heartbeat is not None and not heartbeat():
            return deleted


def delete_terminal_runs(
    *, older_than_seconds: float, batch: int = 500, heartbeat: Callable[[], bool] | None = None
) -> int:
    """Delete terminal runs finished longer ago than that, with their events,
    tool records, checkpoints and keys; in batches. Returns how many runs
    were deleted (their rows, not the related ones)."""
    deleted = 0
    cutoff = timezone.now() - dt.timedelta(seconds=older_than_seconds)
    while True:
        ids = list(
            Run.objects.filter(status__in=TERMINAL_STATUSES, finished_at__lt=cutoff).values_list(
                "id", flat=True
            )[:batch]
        )
        if not ids:
            return deleted
        with transaction.atomic():
            # Re-checked at the delete: a run requeued since the read stays
            # and is not counted.
            _, by_model = Run.objects.filter(id__in=ids, status__in=TERMINAL_STATUSES).delete()
        deleted += by_model.get(Run._meta.label, 0)
        if heartbeat is not None and not heartbeat():
            return deleted
