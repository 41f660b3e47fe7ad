"""Pause and resume a kind, in one priority class or in all.

A paused kind is not claimed: the claim's candidate query skips runs with a
matching ``runqueue_paused_kind`` row. Its queued runs wait, running ones
finish, and the runs table is not written: pausing is one row here and a
``kind.paused`` queue event; resuming deletes the row, records
``kind.resumed`` and wakes the idle workers of the class.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from runqueue import events
from runqueue.leases import notify
from runqueue.models import PausedKind, PriorityClass
from runqueue.submission_rules import TEXT_LIMITS


def _check(kind: object, priority_class: object) -> tuple[str, int | None]:
    longest = TEXT_LIMITS["kind"]
    if not isinstance(kind, str) or not kind or len(kind) > longest:
        raise ValueError(f"kind must be a 1-{longest} character string, got {kind!r}")
    if priority_class is None:
        return kind, None
    for member in PriorityClass:
        if member.value == priority_class:
            return kind, int(member)
    raise ValueError(
        f"priority_class must be one of {PriorityClass.values} or None, got {priority_class!r}"
    )


def pause_kind(
    kind: str, *, priority_class: int | None = None, actor: str, reason: str
) -> tuple[PausedKind, bool]:
    """Stop claiming runs of ``kind`` (in one class, or all); (row, created).

    Pausing what is already paused changes nothing and records no event.
    """
    kind, priority_class = _check(kind, priority_class)
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("a pause needs a reason")
    try:
        with transaction.atomic():
            row = PausedKind.objects.create(
                kind=kind, priority_class=priority_class, paused_by=actor, reason=reason
            )
            events.record(events.KIND_PAUSED, kind, _data(priority_class, actor, reason))
    except IntegrityError:
        return PausedKind.objects.get(kind=kind, priority_class=priority_class), False
    row.refresh_from_db(fields=["paused_at"])
    return row, True


def resume_kind(
    kind: str, *, priority_class: int | None = None, actor: str, reason: str = ""
) -> bool:
    """Claim runs of ``kind`` again; False if that pause did not exist."""
    kind, priority_class = _check(kind, priority_class)
    with transaction.atomic():
        deleted, _ = PausedKind.objects.filter(kind=kind, priority_class=priority_class).delete()
        if not deleted:
            return False
        events.record(events.KIND_RESUMED, kind, _data(priority_class, actor, reason))
        # Its queued runs are claimable again: wake the idle slots (on commit).
        notify(priority_class)
    return True


def is_paused(kind: str, priority: int) -> bool:
    """Whether the claim skips a run of this kind and priority."""
    cls = int(PriorityClass.of(priority))
    return PausedKind.objects.filter(kind=kind, priority_class__in=[cls]).exists() or (
        PausedKind.objects.filter(kind=kind, priority_class__isnull=True).exists()
    )


def _data(priority_class: int | None, actor: str, reason: str) -> dict:
    label = PriorityClass(priority_class).slug if priority_class is not None else "all"
    return {"priority_class": label, "actor": actor, "reason": reason}
