"""Pause and resume a kind, in one priority class or in all; and one run,
or a run tree.

A paused kind is not claimed: the claim's candidate query skips runs with a
matching ``runqueue_paused_kind`` row. Its queued runs wait, running ones
finish, and the runs table is not written: pausing is one row here and a
``kind.paused`` queue event; resuming deletes the row, records
``kind.resumed`` and wakes the idle workers of the class.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.db import IntegrityError, connection, transaction

from runqueue import events
from runqueue.errors import InvalidTransition, RunNotFound
from runqueue.events import wakeups
from runqueue.leases import notify
from runqueue.leases.base import retry_deadlocks
from runqueue.leases.transitions import checked_operation
from runqueue.models import PausedKind, PriorityClass, Run
from runqueue.sql import execute
from runqueue.submission.rules import TEXT_LIMITS


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


# -- One run, or a run tree ---------------------------------------------------


def pause_run(
    run_id: uuid.UUID | str, *, actor: str, reason: str = "", tree: bool = False
) -> list[uuid.UUID]:
    """Pause a live run (with ``tree``, every live run below it too): not
    claimed until resumed, its start deadline frozen, a running one given
    back at its handler's next step (queued, its attempt returned, nothing
    recorded lost; docs/decisions/run-trees.md, "Pausing one run"). Each run paused
    gets ``run.paused``. The ids paused: none when all were paused already.
    Raises InvalidArgument, RunNotFound, InvalidTransition (the run ended
    and, with ``tree``, nothing below it is live)."""
    run_id = checked_operation("pause_run", run_id, reason=reason, actor=actor)
    data = {"actor": actor, "reason": reason}
    if tree:
        data["tree_from"] = str(run_id)

    def write() -> list[uuid.UUID]:
        rows = _statement("pause_runs", run_id, tree)
        for paused_id, status, epoch in rows:
            events.append(paused_id, events.PAUSED, epoch, data)
            if status == "running":
                wakeups.send(wakeups.Paused(run_id=paused_id))
        if not rows:
            _check_pausable(run_id)
        return [row[0] for row in rows]

    return _retrying(f"pause of run id={run_id}", write)


def resume_run(
    run_id: uuid.UUID | str, *, actor: str, reason: str = "", tree: bool = False
) -> list[uuid.UUID]:
    """Resume what ``pause_run`` paused (with ``tree``, below it too): its
    start deadline moved on by the time paused, the idle workers woken for
    the queued ones. Each run resumed gets ``run.unpaused``. The ids
    resumed: none when none was paused. Raises InvalidArgument, RunNotFound."""
    run_id = checked_operation("resume_run", run_id, reason=reason, actor=actor)

    def write() -> list[uuid.UUID]:
        rows = _statement("resume_runs", run_id, tree)
        for resumed_id, status, epoch, priority, seconds in rows:
            events.append(
                resumed_id,
                events.UNPAUSED,
                epoch,
                {"actor": actor, "reason": reason, "paused_seconds": round(seconds, 3)},
            )
            if status == "queued":
                notify(priority)
        if not rows and not Run.objects.filter(id=run_id).exists():
            raise RunNotFound(run_id)
        return [row[0] for row in rows]

    return _retrying(f"resume of run id={run_id}", write)


def _statement(name: str, run_id: uuid.UUID, tree: bool) -> list[tuple]:
    with connection.cursor() as cursor:
        return execute(cursor, name, {"run_id": run_id, "tree": tree}).fetchall()


def _check_pausable(run_id: uuid.UUID) -> None:
    """Nothing was paused: RunNotFound, InvalidTransition for a run that
    ended, or nothing to say (it was paused already)."""
    row = Run.objects.filter(id=run_id).values_list("status", "paused_at").first()
    if row is None:
        raise RunNotFound(run_id)
    status, paused_at = row
    if paused_at is None and status in ("succeeded", "failed", "cancelled"):
        raise InvalidTransition(run_id, status, "pause")


def _retrying[T](what: str, write: Callable[[], T]) -> T:
    """``write`` in a transaction of its own, run again on a deadlock (a
    tree's rows are locked in the walk's order, a finishing child locks
    itself and then its parent) or a row a finish moved meanwhile."""

    def once() -> T:
        with transaction.atomic(durable=True):
            return write()

    return retry_deadlocks(what, once)
