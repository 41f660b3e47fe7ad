"""The fence: every worker transaction starts with an UPDATE that asserts
the lease; zero rows means fenced, and nothing else is written."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.db import OperationalError, connection, transaction

from runqueue import events
from runqueue.db import sqlstate
from runqueue.leases.base import (
    DEADLOCK_ATTEMPTS,
    Lease,
    deadlock_pause,
    hooks,
    moved_by_another,
    observers,
    retry_moved,
)
from runqueue.models import (
    Run,
    RunStatus,
)
from runqueue.sql import prepared
from runqueue.types import Params

# --- the fence ---------------------------------------------------------------


def _still_owned(lease: Lease) -> bool:
    return Run.objects.filter(
        id=lease.run_id,
        lease_epoch=lease.epoch,
        lease_token=lease.token,
        status=RunStatus.RUNNING,
    ).exists()


def record_fenced(lease: Lease, action: str) -> None:
    """Append run.fenced once per lease, after the fenced transaction rolled back."""
    if not lease.mark_fenced():
        return
    retry_moved(lambda: _record_fenced(lease, action))


def _record_fenced(lease: Lease, action: str) -> None:
    with transaction.atomic(durable=True):
        # Under the run row's lock, as every event insert: a run's event ids
        # then follow commit order, which the event stream's cursor needs.
        current = (
            Run.objects.select_for_update(no_key=True)
            .filter(id=lease.run_id)
            .values_list("lease_epoch", "status")
            .first()
        )
        if observers.fenced is not None:
            observers.fenced(lease, action, current)
        if current is None:
            return
        events.append(
            lease.run_id,
            events.FENCED,
            lease.epoch,
            {
                "owner": lease.owner,
                "token": str(lease.token),
                "action": action,
                "current_epoch": current[0],
                "current_status": current[1],
            },
        )


def fenced(
    lease: Lease,
    action: str,
    fence: str,
    params: Params | None = None,
    write: Callable[[tuple], None] | None = None,
    *,
    closes: bool = False,
) -> tuple[object, ...] | None:
    """Run one worker transaction behind the fence; the fence row, or None if
    fenced (or the lease is already spent). ``closes``: this write ends the lease."""
    with lease.write_lock:
        if lease.fenced or lease.closed:
            return None
        row = fenced_transaction(lease, action, fence, params, write)
        if row is not None and closes:
            lease.closed = True
        return row


#: Attempts of a worker transaction that met a deadlock, or a row moved
#: by another, while its lease still held (a child's terminal transition
#: waits for its parent's row: runqueue_join): as many as a cancel's.
CONFLICT_ATTEMPTS = DEADLOCK_ATTEMPTS


def _again_on_conflict[**P, R](attempt: Callable[P, R]) -> Callable[P, R]:
    """``attempt`` run again, after ``deadlock_pause``, while it raises
    ``_ConflictError`` (at most CONFLICT_ATTEMPTS times; then the error)."""

    @functools.wraps(attempt)
    def again(*args: P.args, **kwargs: P.kwargs) -> R:
        for number in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return attempt(*args, **kwargs)
            except _ConflictError as conflict:
                if number == CONFLICT_ATTEMPTS:
                    raise conflict.error from None
                deadlock_pause(number)
        raise AssertionError("unreachable")

    return again


class _ConflictError(Exception):
    def __init__(self, error: OperationalError) -> None:
        self.error = error


@_again_on_conflict
def fenced_transaction(
    lease: Lease,
    action: str,
    fence: str,
    params: Params | None,
    write: Callable[[tuple], None] | None,
) -> tuple[object, ...] | None:
    """The fence statement, then ``write(row)`` in the same transaction; the
    fence row, or None when fenced (``run.fenced`` recorded). Callers hold
    the lease's write lock, or know the lease is theirs alone.

    A deadlock (40P01), or a row moved by another (40001), wrote nothing:
    re-read, and if the lease still holds run the transaction again (a
    cascading cancel locks parent then children, a child's join child then
    parent; PostgreSQL breaks such a cycle by failing one of them)."""
    try:
        if write is None and not connection.in_atomic_block:
            # The fence is the whole transaction (a heartbeat, or a finish
            # whose event is in the same statement): one statement in
            # autocommit, so no BEGIN and COMMIT round trips.
            row = _fence_row(lease, fence, params)
            if row is None:
                raise _FencedError  # zero rows: fenced, nothing was written
            return row
        with transaction.atomic(durable=True):
            row = _fence_row(lease, fence, params)
            if row is None:
                # Zero rows: fenced. Roll back and write nothing else here.
                raise _FencedError
            if write is not None:
                write(row)
            if hooks.inside_fence is not None:  # observes only
                hooks.inside_fence(lease, action)
            return row
    except _FencedError:
        pass
    except OperationalError as exc:
        # 40001 on a fenced write means "possibly fenced": re-read, never retry blindly.
        code = sqlstate(exc)
        if code not in ("40001", "40P01"):
            raise
        if _still_owned(lease):
            if connection.in_atomic_block or not (code == "40P01" or moved_by_another(exc)):
                raise
            raise _ConflictError(exc) from exc
    record_fenced(lease, action)
    return None


class _FencedError(Exception):
    pass


def _fence_row(lease: Lease, fence: str, params: Params | None) -> tuple[object, ...] | None:
    """Run the fence statement; its row, or None when it matched nothing.
    Inside a transaction the statement also limits how long the transaction
    may sit idle (``idle_timeout``), for this transaction only."""
    params = {
        "run_id": lease.run_id,
        "epoch": lease.epoch,
        "token": lease.token,
        "idle_timeout": idle_timeout(lease) if connection.in_atomic_block else None,
        **(params or {}),
    }
    with prepared(fence, params) as cur:
        return cur.fetchone()


def idle_timeout(lease: Lease) -> str:
    """How long a worker transaction of this lease may sit idle before the
    server ends it, freeing the run's row lock: half the lease (at least
    500 ms), so a frozen worker's lock is gone before its lease expires."""
    return f"{max(int(lease.lease_seconds * 500), 500)}ms"


def renew_params(lease: Lease) -> dict[str, object]:
    return {"lease_seconds": lease.lease_seconds}
