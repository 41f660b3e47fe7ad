"""Why runs wait: due runs held back by paused kinds, keys at their cap,
classes no worker claims; and runs that wait by their own choice (their
children, a signal, a time, the user), counted by reason.

The dashboard and ``/metrics`` read this so that "oldest due run waiting
111 s" comes with its cause. Every count is capped (``CAP``) and every list
bounded: the causes are few (paused kinds, capped keys, three classes) and
the runs they hold back are counted up to the cap, never all.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Now

from runqueue import db
from runqueue.conf import get_settings
from runqueue.models import (
    ConcurrencyLimit,
    PausedKind,
    PriorityClass,
    Run,
    RunStatus,
    WaitReason,
    Worker,
)
from runqueue.sql import execute

#: Runs held back are counted up to this many per cause.
CAP = 1_000
#: At most this many causes of each sort are looked at.
MOST = 100

PAUSED_KIND = "paused_kind"
KEY_AT_CAP = "key_at_cap"
NO_WORKER = "no_worker"


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason due runs of a class wait, and how many it holds back."""

    cls: PriorityClass
    reason: str
    subject: str
    waiting: int
    detail: str


def due_queued(cls: PriorityClass) -> QuerySet[Run]:
    low, high = cls.bounds
    return Run.objects.filter(
        Q(scheduled_for__isnull=True) | Q(scheduled_for__lte=Now()),
        status=RunStatus.QUEUED,
        priority__gte=low,
        priority__lte=high,
    )


def _count(queryset: QuerySet[Run]) -> int:
    """Due runs counted up to CAP in the claim's order, so the count walks
    the claim index (or the key index) rather than the live partition."""
    return db.capped_count(queryset, CAP, "priority", "created_at")


def _many(n: int) -> str:
    return f"more than {CAP:,}" if n > CAP else f"{n:,}"


def paused_kinds() -> list[Cause]:
    causes = []
    for paused in PausedKind.objects.order_by("kind", "priority_class")[:MOST]:
        classes = (
            list(PriorityClass)
            if paused.priority_class is None
            else [PriorityClass(paused.priority_class)]
        )
        for cls in classes:
            n = _count(due_queued(cls).filter(kind=paused.kind))
            if n:
                causes.append(
                    Cause(
                        cls,
                        PAUSED_KIND,
                        paused.kind,
                        n,
                        f"kind {paused.kind} is paused ({paused.reason}, by {paused.paused_by}):"
                        f" {_many(n)} due run(s) wait",
                    )
                )
    return causes


def keys_at_cap() -> list[Cause]:
    """Keys whose running runs fill their cap (a limit row or the class's
    default), or whose limit is 0, while due runs of theirs wait."""
    conf = get_settings()
    limits = {
        (row.key, row.priority_class): row.max_running
        for row in ConcurrencyLimit.objects.order_by("key")[: MOST * 10]
    }
    running: dict[tuple[str, int], int] = {}
    rows = (
        Run.objects.filter(status=RunStatus.RUNNING)
        .annotate(ci=PriorityClass.orm_index("priority"))
        .values("concurrency_key", "ci")
        .annotate(n=Count("*"))
        .order_by("-n")[: MOST * 10]
    )
    for row in rows:
        cls = PriorityClass.by_index(row["ci"])
        running[(row["concurrency_key"], cls.value)] = row["n"]
    candidates = set(running) | {k for k, cap in limits.items() if cap == 0}
    causes = []
    for key, value in sorted(candidates)[:MOST]:
        cls = PriorityClass(value)
        cap = limits.get((key, value), conf.default_cap(cls))
        held = running.get((key, value), 0)
        if cap is None or held < cap:
            continue
        n = _count(due_queued(cls).filter(concurrency_key=key))
        if n:
            what = "is paused (limit 0)" if cap == 0 else f"has {held} running, its cap is {cap}"
            causes.append(
                Cause(cls, KEY_AT_CAP, key, n, f"key {key} {what}: {_many(n)} due run(s) wait")
            )
    return causes


def live_workers() -> QuerySet[Worker]:
    """Workers seen within three heartbeats and not stopped."""
    stale = dt.timedelta(seconds=3 * get_settings().HEARTBEAT_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, last_seen_at__gte=Now() - stale)


def unclaimed_classes() -> list[Cause]:
    """Classes with due runs that no live worker has a slot for."""
    served: set[str] = set()
    for slots in live_workers().values_list("slots", flat=True)[:MOST]:
        for label in slots or {}:
            served.update(label.split(","))
    causes = []
    for cls in PriorityClass:
        if cls.slug in served:
            continue
        n = _count(due_queued(cls))
        if n:
            causes.append(
                Cause(
                    cls,
                    NO_WORKER,
                    "",
                    n,
                    f"no live worker has a slot for {cls.slug}: {_many(n)} due run(s) wait",
                )
            )
    return causes


def causes() -> list[Cause]:
    """Every cause found, in class order."""
    found = [*unclaimed_classes(), *paused_kinds(), *keys_at_cap()]
    return sorted(found, key=lambda c: c.cls.index)


def waiting_by_reason(cap: int = CAP) -> dict[str, int]:
    """Runs waiting (status waiting or waiting_for_user) per WaitReason,
    each counted up to ``cap + 1`` through the waiting index. They hold no
    slot and no lease."""
    params = {"reasons": list(WaitReason.values), "cap": cap + 1}
    with connection.cursor() as cursor:
        return dict(execute(cursor, "waiting_by_reason", params).fetchall())


def slot_holders(limit: int = 50) -> list[Run]:
    """The running runs, longest running first, with the worker holding each."""
    return list(
        Run.objects.filter(status=RunStatus.RUNNING)
        .order_by("started_at")
        .only("id", "kind", "priority", "tenant", "concurrency_key", "lease_owner", "started_at")[
            :limit
        ]
    )
