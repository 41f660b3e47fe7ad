"""runqueue's own handlers: housekeeping jobs of the maintenance class, and
the ``django.tasks`` kind (registered by importing the tasks backend, which
also registers Django's ``check_tasks``)."""

from __future__ import annotations

from runqueue import leases, tasks_backend  # noqa: F401 - registers the django.tasks kind
from runqueue.conf import get_settings
from runqueue.housekeeping import PRUNE_KEYS, PRUNE_RUNS
from runqueue.registry import handler
from runqueue.runtime import RunContext
from runqueue.submission import prune_idempotency_keys as prune_keys


@handler(PRUNE_KEYS)
def prune_idempotency_keys(ctx: RunContext) -> dict:
    """Delete expired Idempotency-Keys, in small batches."""
    return {"deleted": prune_keys(batch=1000, heartbeat=ctx.heartbeat)}


@handler(PRUNE_RUNS)
def prune_terminal_runs(ctx: RunContext) -> dict:
    """Delete terminal runs (with their events) past TERMINAL_RUN_RETENTION_SECONDS."""
    retention = get_settings().TERMINAL_RUN_RETENTION_SECONDS
    if retention is None:
        return {"deleted": 0, "retention": None}
    deleted = leases.prune_terminal_runs(
        older_than_seconds=retention, batch=500, heartbeat=ctx.heartbeat
    )
    return {"deleted": deleted, "retention": retention}
