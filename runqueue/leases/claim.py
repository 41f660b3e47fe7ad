"""Claim, and finish-and-claim: one statement, FOR UPDATE SKIP LOCKED, by
priority then age.

A worker's slot group writes the outcomes its slots decided (succeeded,
failed) and claims their next runs in the same statement
(``finish_and_claim``), so a run costs about one commit. Each finish keeps
its own fence: a lease whose row did not match wrote nothing and records
``run.fenced`` in its own transaction, exactly as a finish written alone (``fence_finish``) would.
A statement that fails with a serialization failure or a deadlock wrote
nothing, claims included; its finishes are then written alone, each
through the ordinary fence.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from dataclasses import field as default
from functools import cache

import psycopg
from django.db import DatabaseError, connection, transaction

from runqueue import registry
from runqueue.capacity import budgets, concurrency
from runqueue.conf import get_settings
from runqueue.db import sqlstate
from runqueue.leases.base import ALL_CLASSES, Lease, retry_moved
from runqueue.leases.fence import fenced_transaction, record_fenced
from runqueue.leases.outcomes import Finish, Succeeded
from runqueue.leases.writes import finish_params
from runqueue.models import PriorityClass
from runqueue.models.rows import run_from_row
from runqueue.sql import array_literal, json_rows, prepared
from runqueue.submission.inserts import insert_runs
from runqueue.submission.rules import CheckedSubmission

#: Errors after which the statement is known to have written nothing, so
#: each finish is retried alone (and re-checks its own fence).
_RETRY_ALONE = frozenset({"40001", "40P01"})


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """Who claims, from which classes, how many at most, for how long, and
    the kinds and versions it has handlers for (this process's registry:
    a run of another kind, or pinned to a version it lacks, is left queued
    for a worker that has it)."""

    owner: str
    classes: tuple[PriorityClass, ...]
    limit: int
    lease_seconds: float
    served: registry.Served = default(default_factory=registry.served)

    def params(self) -> dict[str, object]:
        return {
            "owner": self.owner,
            "lease_seconds": self.lease_seconds,
            "limit": self.limit,
            "min_priority": min(c.bounds[0] for c in self.classes),
            "max_priority": max(c.bounds[1] for c in self.classes),
            "class_indexes": array_literal(sorted({c.index for c in self.classes})),
        } | self.served.params()


def claim(
    owner: str,
    classes: Iterable[PriorityClass] = ALL_CLASSES,
    *,
    limit: int = 1,
    lease_seconds: float | None = None,
    served: registry.Served | None = None,
) -> list[Lease]:
    """Claim up to ``limit`` due runs from ``classes``, by priority then age,
    of the kinds and versions ``served`` (this process's handlers if None)."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    spec = claim_spec(owner, classes, limit=limit, lease_seconds=lease_seconds, served=served)
    if connection.in_atomic_block:
        with transaction.atomic(durable=True):  # raises: a claim is never nested
            return _statement((), spec)[1]
    # One statement (the event is in it): in autocommit, a transaction of
    # its own, without the round trips of BEGIN and COMMIT.
    return retry_moved(lambda: _statement((), spec)[1])


def claim_one(
    owner: str,
    classes: Iterable[PriorityClass] = ALL_CLASSES,
    *,
    lease_seconds: float | None = None,
    served: registry.Served | None = None,
) -> Lease | None:
    """Claim the next due run from ``classes``, or None."""
    leases = claim(owner, classes, limit=1, lease_seconds=lease_seconds, served=served)
    return leases[0] if leases else None


def claim_spec(
    owner: str,
    classes: Iterable[PriorityClass],
    *,
    limit: int,
    lease_seconds: float | None = None,
    served: registry.Served | None = None,
) -> ClaimSpec:
    """A checked ClaimSpec; ``lease_seconds`` defaults to LEASE_SECONDS,
    ``served`` to this process's handlers."""
    chosen = tuple(PriorityClass(c) for c in classes)
    if not chosen:
        raise ValueError("claim needs at least one priority class")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    seconds = get_settings().LEASE_SECONDS if lease_seconds is None else lease_seconds
    return ClaimSpec(owner, chosen, limit, float(seconds), served or registry.served())


def finish_and_claim(
    finishes: Sequence[tuple[Lease, Finish]], spec: ClaimSpec
) -> tuple[list[bool], list[Lease]]:
    """Write ``finishes`` and claim up to ``spec.limit`` runs in one statement.

    Returns, per finish, True if it committed and False if it was fenced
    (``run.fenced`` recorded), and the new leases. Other database errors are
    raised: the statement may or may not have committed, so its finished
    runs are left to lease expiry and its claims to the sweeper.

    Holds every finishing lease's write lock meanwhile, so a heartbeat of
    one of them never mistakes the finish's commit for a fencing.
    """
    if connection.in_atomic_block:
        raise RuntimeError("finish_and_claim runs in autocommit, outside any transaction")
    with ExitStack() as locks:
        for lease, _ in finishes:
            locks.enter_context(lease.write_lock)
        live = [(lease, o) for lease, o in finishes if not (lease.fenced or lease.closed)]
        try:
            committed, claimed = _statement(live, spec)
        except DatabaseError as exc:
            if sqlstate(exc) not in _RETRY_ALONE:
                raise
            committed = {lease.run_id for lease, o in live if _finish_alone(lease, o)}
            claimed = []
        outcomes = []
        for lease, outcome in finishes:
            ok = lease.run_id in committed and not lease.closed
            if ok:
                lease.closed = True
            elif not (lease.fenced or lease.closed):
                # Its row did not match: fenced, and nothing was written for it.
                record_fenced(lease, outcome.name)
            outcomes.append(ok)
        return outcomes, claimed


def _finish_alone(lease: Lease, outcome: Finish) -> bool:
    """One finish in a transaction of its own, through the ordinary fence
    (after a statement that wrote nothing)."""
    params = finish_params(lease, outcome)
    return fenced_transaction(lease, outcome.name, "fence_finish", params, None) is not None


def statement_params(
    finishes: Sequence[tuple[Lease, Finish]], spec: ClaimSpec
) -> dict[str, object]:
    """``finish_and_claim``'s parameters: the finishes as one JSON document
    (and their ids, epochs and tokens as arrays), the claim's."""
    durable = bool(finishes) or get_settings().DURABLE_CLAIMS
    return spec.params() | {
        # A statement that only claims need not wait for the disk (claim.sql,
        # claim_commit); one that finishes runs must.
        "claim_commit": None if durable else "off",
        "ids": [lease.run_id for lease, _ in finishes],
        # The capped walk's (runqueue_claim_capped): the places these free.
        "epochs": [lease.epoch for lease, _ in finishes],
        "tokens": [lease.token for lease, _ in finishes],
        "finishes": _finishes_document(finishes),
        "channel": get_settings().NOTIFY_CHANNEL,
    }


def _finishes_document(finishes: Sequence[tuple[Lease, Finish]]) -> str:
    """The finish fragment's finishes (finish.sql; ``runqueue.sql.json_rows``):
    id, epoch, token, status, event type, then the result and the failure
    as ``[text]`` or ``[]`` and the event's data, spliced in as the JSON
    text they already are."""
    rows = []
    for lease, outcome in finishes:
        v = finish_params(lease, outcome)
        token = None if lease.token is None else str(lease.token)
        result = "[]" if v["result"] is None else f"[{v['result']}]"
        failure = "[]" if v["failure"] is None else f"[{v['failure']}]"
        head = [str(lease.run_id), lease.epoch, token, v["status"], v["event_type"]]
        rows.append((head, (result, failure, str(v["event_data"]))))
    return json_rows(rows)


def capped_claim(spec: ClaimSpec) -> bool:
    """Whether a claim runs the capped walk (the ``*_capped`` statements,
    with ``concurrency.claim_params``) or the plain claim, which pays
    nothing for caps and budgets: the walk when a concurrency cap or a
    budget may apply to the spec's classes (each cached per process,
    ``concurrency.caps_may_apply`` and ``budgets.may_apply``). The plain
    claim never takes a run with a budget, so a stale "no budgets" only
    leaves such a run queued until the cache is read again."""
    return bool(spec.limit) and (concurrency.caps_may_apply(spec.classes) or budgets.may_apply())


def _statement(
    finishes: Sequence[tuple[Lease, Finish]], spec: ClaimSpec
) -> tuple[set[uuid.UUID], list[Lease]]:
    """Run ``finish_and_claim`` (``claim`` when there is nothing to finish):
    the ids whose finish committed, and the new leases."""
    params = statement_params(finishes, spec)
    if capped := capped_claim(spec):
        params |= concurrency.claim_params()
    if finishes:
        name = "finish_and_claim_capped" if capped else "finish_and_claim"
    else:
        name = "claim_capped" if capped else "claim"
    with prepared(name, params) as cursor:
        rows = cursor.fetchall()
        names = _column_names(cursor)
    if not finishes:
        # claim's rows are the claimed runs alone.
        return set(), [_lease(names, row, spec) for row in rows]
    finished = set(rows[0][0]) if rows else set()
    return finished, [_lease(names, row, spec) for row in rows if row[1] is not None]


def _column_names(cursor: psycopg.Cursor) -> tuple[str, ...]:
    """The result's column names, read from libpq: ``cursor.description``
    builds a Column object per column on every call (a claimed row has
    about 40), a tenth of a wake-up's claim in Python."""
    result = cursor.pgresult
    if result is None:
        return ()
    return _decoded(tuple(result.fname(i) for i in range(result.nfields)))


@cache
def _decoded(raw: tuple[bytes | None, ...]) -> tuple[str, ...]:
    return tuple((name or b"").decode() for name in raw)


def _lease(names: tuple[str, ...], row: tuple, spec: ClaimSpec) -> Lease:
    return Lease(run=run_from_row(names, row), owner=spec.owner, lease_seconds=spec.lease_seconds)


#: The kind (and tenant) of the run ``warm_connection`` inserts, claims and
#: finishes in a transaction it rolls back; no handler has it.
WARM_KIND = "runqueue.warm"


def warm_connection(spec: ClaimSpec) -> None:
    """Pay this thread's connection's first claim that moves a run before a
    user's run does: on a new connection the server loads its caches of the
    partitions, indexes, triggers and functions a claim and a finish touch
    (a first claim took 15 ms, the next 3: docs/performance.md). A run of
    its own is inserted, claimed and finished through the statements
    ``spec``'s claims send, in a transaction rolled back: nothing of it
    stays, and no NOTIFY is sent."""
    warm = replace(spec, limit=1, served=registry.Served.build({WARM_KIND: {1: ()}}))
    run = CheckedSubmission(
        kind=WARM_KIND,
        payload={},
        session_id=None,
        tenant=WARM_KIND,
        principal="",
        priority=min(c.bounds[0] for c in warm.classes),
        scheduled_for=None,
        max_attempts=1,
        idempotency_key=None,
        concurrency_key=WARM_KIND,
        payload_text="{}",
    )
    with transaction.atomic():
        insert_runs([run], [""], traceparent="")  # the one insert of runs
        _written, claimed = _statement([], warm)
        if claimed:
            _statement([(claimed[0], Succeeded.of(None))], replace(warm, limit=0))
        transaction.set_rollback(True)
