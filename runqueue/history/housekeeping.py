"""The queue's own housekeeping: what it deletes, the maintenance-class
runs that delete it, and their schedule (the worker calls ``schedule``).

Each job lives in a session of its own, so however many workers schedule it,
at most one is queued or running at a time (the session constraint).
Dropping finished runs past their retention is the one write to the runs
table outside ``runqueue.submission`` and ``runqueue.leases``: it drops whole
day partitions of finished runs (``runqueue.history.partitions``), never a live run,
so it needs no lease and bumps no epoch. ``maintain_partitions`` makes the
days ahead; the worker's housekeeping calls it through ``schedule``.
The mailbox (``runqueue_signal``) keeps a signal only for a wait of its
run: the signals of runs no longer live are deleted by their own job, so a
run that finished without waiting for what was sent to it leaves nothing
behind for long. Inbound events are kept ``EVENT_RETENTION_SECONDS`` and
deleted by theirs (``runqueue.events.inbound.prune``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError
from django.db.models import Exists, OuterRef
from django.db.models.functions import Now

from runqueue.conf import get_settings
from runqueue.errors import ActiveRunConflict
from runqueue.events import inbound as events_in
from runqueue.history import partitions
from runqueue.models import LIVE_STATUSES, IdempotencyKey, PriorityClass, Run, Signal
from runqueue.registry import handler
from runqueue.runtime import RunContext
from runqueue.submission.submit import submit

PRUNE_KEYS = "runqueue.prune_idempotency_keys"
PRUNE_RUNS = "runqueue.prune_terminal_runs"
PRUNE_SIGNALS = "runqueue.prune_signals"
PRUNE_EVENTS = "runqueue.prune_inbound_events"
TENANT = "runqueue"

logger = logging.getLogger("runqueue.history.housekeeping")


def maintain_partitions() -> list[str]:
    """Make the day partitions of today and the days ahead (cheap when they
    exist: one catalog read per table), and summarize the BRIN ranges the
    days wrote since (``partitions.summarize``). A failure is logged, never
    raised: the default partitions take the rows, and the dashboard reads an
    unsummarized range whole, until the next try."""
    try:
        made = partitions.ensure()
    except DatabaseError:
        logger.exception("Could not make the day partitions ahead; retrying next time")
        made = []
    try:
        partitions.summarize()
    except DatabaseError:
        logger.exception("Could not summarize the days' BRIN indexes; retrying next time")
    return made


def schedule() -> list[Run]:
    """Make the days ahead; submit each housekeeping run unless one is
    already active."""
    maintain_partitions()
    submitted = []
    for kind in (PRUNE_KEYS, PRUNE_RUNS, PRUNE_SIGNALS, PRUNE_EVENTS):
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


@handler(PRUNE_SIGNALS)
def prune_signals(ctx: RunContext) -> dict:
    """Delete the signals kept for runs no longer live, in small batches."""
    return {"deleted": delete_finished_signals(batch=1000, heartbeat=ctx.heartbeat)}


@handler(PRUNE_EVENTS)
def prune_inbound_events(ctx: RunContext) -> dict:
    """Delete the inbound events past EVENT_RETENTION_SECONDS, in small batches."""
    return {"deleted": events_in.prune(batch=1000, heartbeat=ctx.heartbeat)}


@handler(PRUNE_RUNS)
def prune_terminal_runs(ctx: RunContext) -> dict:
    """Drop the days of finished runs (with their events) past
    TERMINAL_RUN_RETENTION_SECONDS."""
    retention = get_settings().TERMINAL_RUN_RETENTION_SECONDS
    if retention is None:
        return {"deleted": 0, "retention": None}
    pruned = prune_terminal(retention)
    return {"deleted": pruned.runs, "days": pruned.days, "retention": retention}


def prune_terminal(older_than_seconds: float) -> partitions.Pruned:
    """One retention pass: the days ahead, then every day past the retention."""
    maintain_partitions()
    pruned = partitions.prune(older_than_seconds=older_than_seconds)
    logger.info(
        "Pruned %s runs and %s events (%s days) in %.2fs, %.3fs waiting for or holding locks",
        pruned.runs,
        pruned.events,
        len(pruned.days),
        pruned.seconds,
        pruned.lock_seconds,
    )
    return pruned


def delete_expired_keys(*, batch: int = 1000, heartbeat: Callable[[], bool] | None = None) -> int:
    """Delete expired keys in batches (small transactions, little bloat)."""
    deleted = 0
    while True:
        ids = list(
            IdempotencyKey.objects.filter(expires_at__lte=Now()).values_list("id", flat=True)[
                :batch
            ]
        )
        if not ids:
            return deleted
        deleted += IdempotencyKey.objects.filter(id__in=ids).delete()[0]
        if heartbeat is not None and not heartbeat():
            return deleted


def delete_finished_signals(
    *, batch: int = 1000, heartbeat: Callable[[], bool] | None = None
) -> int:
    """Delete the mailbox's signals of runs that are no longer live
    (finished, or gone), in batches: a kept signal waits only for a wait of
    its run, and a finished run never waits again. The delete reads the
    runs again, so a run an operator requeued meanwhile keeps its own."""
    live = Run.objects.filter(id=OuterRef("run_id"), status__in=LIVE_STATUSES)
    orphaned = Signal.objects.filter(~Exists(live))
    deleted = 0
    while True:
        ids = list(orphaned.values_list("id", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += orphaned.filter(id__in=ids).delete()[0]
        if heartbeat is not None and not heartbeat():
            return deleted
