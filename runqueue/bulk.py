"""Bulk requeue and cancel of every run a filter matches, in batches,
through the same service functions as one run (``leases.requeue``,
``leases.cancel``), so each run gets its own transition, epoch bump and
event naming the actor. A run that cannot be acted on (its session busy,
finished meanwhile) is reported and left as it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.db.models import QuerySet

from runqueue import leases
from runqueue.errors import RunqueueError
from runqueue.models import ACTIVE_STATUSES, Run, RunStatus

#: Runs per batch: their ids are read, acted on one by one, then reported.
BATCH = 200

VERBS = ("requeue", "cancel")


def actionable(queryset: QuerySet[Run], verb: str) -> QuerySet[Run]:
    """The runs of a filter the verb can act on: failed ones for requeue,
    non-terminal ones for cancel."""
    if verb == "requeue":
        return queryset.filter(status=RunStatus.FAILED)
    if verb == "cancel":
        return queryset.filter(status__in=ACTIVE_STATUSES)
    raise ValueError(f"unknown bulk action {verb!r}; one of {', '.join(VERBS)}")


@dataclass
class BulkResult:
    """What a bulk action did: runs changed, and runs left with the reason."""

    done: int = 0
    refused: list[tuple[uuid.UUID, RunqueueError]] = field(default_factory=list)


def apply(
    run_ids: Sequence[uuid.UUID],
    *,
    verb: str,
    actor: str,
    reason: str,
    batch: int = BATCH,
    after_batch: Callable[[list[Run]], None] | None = None,
) -> BulkResult:
    """Requeue or cancel each run, ``batch`` at a time; ``after_batch`` gets
    the runs each batch changed (the admin writes its LogEntries there)."""
    if verb not in VERBS:
        raise ValueError(f"unknown bulk action {verb!r}; one of {', '.join(VERBS)}")
    result = BulkResult()
    for start in range(0, len(run_ids), batch):
        done: list[Run] = []
        for run_id in run_ids[start : start + batch]:
            try:
                if verb == "requeue":
                    done.append(leases.requeue(run_id, actor=actor, reason=reason))
                else:
                    done.append(leases.cancel(run_id, reason=reason, actor=actor))
            except RunqueueError as exc:
                result.refused.append((run_id, exc))
        result.done += len(done)
        if after_batch is not None and done:
            after_batch(done)
    return result
