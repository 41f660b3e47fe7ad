"""Finishes of several runs in one statement: the worker's completer writes
its slots' succeeds and fails this way (``runqueue.worker.completer``).

Each row keeps its own fence (id, epoch, ``status = 'running'``), so a
batch is as fenced as the single writes: a lease whose row did not match
wrote nothing and records ``run.fenced`` in its own transaction, exactly as
``leases.succeed`` would. A batch that fails with a serialization failure or
a deadlock wrote nothing; each of its finishes is then written alone,
through the ordinary fence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection

from runqueue.leases.base import Lease
from runqueue.leases.fence import _fenced_transaction, _record_fenced, _sqlstate
from runqueue.sql import prepared

#: Errors after which the batch statement is known to have written nothing,
#: so each finish is retried alone (and re-checks its own fence).
_RETRY_ALONE = frozenset({"40001", "40P01"})


@dataclass(frozen=True, eq=False)
class Finish:
    """One run's finish: ``fence_finish``'s parameters (see ``succeed_params``
    and ``fail_params``) and the action it is logged as (succeed, fail)."""

    lease: Lease
    action: str
    params: dict[str, Any]


def _json_text(value: Any) -> str | None:
    """A finish parameter (psycopg ``Jsonb`` or None) as the batch's JSON text."""
    return None if value is None else json.dumps(value.obj)


def finish_batch(finishes: Sequence[Finish]) -> set[Any]:
    """Run ``fence_finish_batch``: one statement in autocommit, so it is the
    fence of every run in it and commits them together. The ids of the runs
    whose fence matched (finished, with their events); the others wrote
    nothing."""
    if connection.in_atomic_block:
        raise RuntimeError("finish_batch runs in autocommit, outside any transaction")
    params: dict[str, list[Any]] = {
        "ids": [f.lease.run_id for f in finishes],
        "epochs": [f.lease.epoch for f in finishes],
        "statuses": [str(f.params["status"]) for f in finishes],
        "results": [_json_text(f.params["result"]) for f in finishes],
        "failures": [_json_text(f.params["failure"]) for f in finishes],
        "event_types": [f.params["event_type"] for f in finishes],
        "event_data": [_json_text(f.params["event_data"]) for f in finishes],
    }
    with prepared("fence_finish_batch", params) as cursor:
        return {row[0] for row in cursor.fetchall()}


def finish_many(finishes: Sequence[Finish]) -> list[bool]:
    """Write the finishes together; for each, True if it committed, False
    if fenced (``run.fenced`` recorded). Other database errors are raised:
    the batch may or may not have committed, so its runs are left to lease
    expiry, as a single finish's would be.

    Holds every lease's write lock meanwhile, so a heartbeat of one of them
    waits for the batch instead of mistaking its commit for a fencing."""
    with ExitStack() as locks:
        for f in finishes:
            locks.enter_context(f.lease._write_lock)
        live = [f for f in finishes if not (f.lease.fenced or f.lease.closed)]
        try:
            committed = finish_batch(live) if live else set()
        except DatabaseError as exc:
            if _sqlstate(exc) not in _RETRY_ALONE:
                raise
            committed = {
                f.lease.run_id
                for f in live
                if _fenced_transaction(f.lease, f.action, "fence_finish", f.params, None)
                is not None
            }
        outcomes = []
        for f in finishes:
            ok = f in live and f.lease.run_id in committed
            if ok:
                f.lease.closed = True
            elif f in live:
                # Its row did not match: fenced, and the batch wrote nothing for it.
                _record_fenced(f.lease, f.action)
            outcomes.append(ok)
        return outcomes
