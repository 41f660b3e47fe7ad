"""The worker's one statement per round: the finishes its slots decided and
the next claim (``finish_and_claim``), every finish behind its own fence. A
fenced finish writes nothing but ``run.fenced`` and costs the claim nothing;
the others commit with their events, in the same commit as the claim.
Races use real connections, as tests/database/claim/test_fencing.py does."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.db import connection

import runqueue
from runqueue import leases, testing
from runqueue.leases.outcomes import Failed, Succeeded
from runqueue.models import EventLog, PriorityClass, Run, RunStatus
from tests.database.claim.test_fencing import Pause
from tests.helpers import Worker, event_types, expire_lease, is_blocked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ASYNC = PriorityClass.ASYNC


def _succeed(lease: leases.Lease, result: Any = None) -> tuple[leases.Lease, Succeeded]:
    return lease, Succeeded.of(result)


def _fail(lease: leases.Lease, message: str) -> tuple[leases.Lease, Failed]:
    return lease, Failed(leases.permanent_failure(ValueError(message), lease.attempt))


def _spec(limit: int, owner: str = "w2") -> leases.ClaimSpec:
    return leases.claim_spec(owner, leases.ALL_CLASSES, limit=limit, lease_seconds=30)


def _claimed(n: int, *, lease_seconds: float = 30) -> list[leases.Lease]:
    for i in range(n):
        runqueue.submit(kind="k", payload={"i": i})
    held = leases.claim("w", leases.ALL_CLASSES, limit=n, lease_seconds=lease_seconds)
    assert len(held) == n
    return held


def test_finishes_and_a_claim_commit_together_a_fenced_finish_costs_the_claim_nothing() -> None:
    first, stale, last = _claimed(3)
    waiting = [runqueue.submit(kind="k", payload={"next": i}).run.id for i in range(2)]
    # The sweeper reclaims one of them: its epoch moves on, its lease is fenced.
    expire_lease(stale.run_id)
    assert [row[1] for row in leases.sweep()] == [RunStatus.QUEUED]

    ok, claimed = leases.finish_and_claim(
        [_succeed(first, {"n": 1}), _succeed(stale, {"n": 2}), _fail(last, "x")], _spec(3)
    )

    assert ok == [True, False, True]
    assert (first.closed, stale.fenced, last.closed) == (True, True, True)
    # The claim took the due runs (the reclaimed one is backing off), by age.
    assert [lease.run_id for lease in claimed] == waiting
    assert all(lease.owner == "w2" and lease.epoch == 1 for lease in claimed)
    runs = {run.id: run for run in Run.objects.all()}
    assert (runs[first.run_id].status, runs[first.run_id].result) == (
        RunStatus.SUCCEEDED,
        {"n": 1},
    )
    assert runs[first.run_id].finished_at is not None
    assert event_types(first.run_id, epoch=1) == ["run.claimed", "run.succeeded"]
    # The fenced row: nothing but run.fenced at its epoch, the run as the sweeper left it.
    assert (runs[stale.run_id].status, runs[stale.run_id].lease_epoch) == (RunStatus.QUEUED, 2)
    assert runs[stale.run_id].result is None
    assert event_types(stale.run_id, epoch=1) == ["run.claimed", "run.fenced"]
    fenced = EventLog.objects.get(run_id=stale.run_id, type="run.fenced")
    assert fenced.data["action"] == "succeeded" and fenced.data["current_epoch"] == 2
    assert runs[last.run_id].status == RunStatus.FAILED
    assert runs[last.run_id].failure["message"] == "x"
    assert event_types(last.run_id, epoch=1) == ["run.claimed", "run.failed"]
    failed = EventLog.objects.get(run_id=last.run_id, type="run.failed")
    assert failed.data["error_type"] == "ValueError" and "traceback" not in failed.data
    for run_id in waiting:
        assert runs[run_id].status == RunStatus.RUNNING
        assert event_types(run_id) == ["run.created", "run.claimed"]


def test_a_finish_alone_and_a_claim_alone() -> None:
    (lease,) = _claimed(1)
    ok, claimed = leases.finish_and_claim([_succeed(lease, "done")], _spec(0))
    assert (ok, claimed) == ([True], [])
    assert Run.objects.get(id=lease.run_id).status == RunStatus.SUCCEEDED
    runqueue.submit(kind="k")
    ok, claimed = leases.finish_and_claim([], _spec(5))
    assert ok == [] and len(claimed) == 1


def test_a_null_result_is_json_null_and_no_result_or_failure_is_sql_null() -> None:
    """The finishes travel as one JSON document: a handler's None is stored
    as the JSON null it returned, a success has no failure and a failure no
    result (SQL NULL), and text that looks like JSON stays text."""
    nothing, text, failing = _claimed(3)
    ok, _ = leases.finish_and_claim(
        [_succeed(nothing, None), _succeed(text, '{"a": [null]}'), _fail(failing, "x")],
        _spec(0),
    )
    assert ok == [True, True, True]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, result IS NULL, jsonb_typeof(result), failure IS NULL FROM runqueue_run"
        )
        rows = {row[0]: row[1:] for row in cursor.fetchall()}
    assert rows[nothing.run_id] == (False, "null", True)
    assert rows[text.run_id] == (False, "string", True)
    assert rows[failing.run_id] == (True, None, False)
    assert Run.objects.get(id=text.run_id).result == '{"a": [null]}'
    assert EventLog.objects.get(run_id=nothing.run_id, type="run.succeeded").data == {"attempt": 1}


def test_a_spent_lease_writes_nothing_and_is_not_called_fenced() -> None:
    done, other = _claimed(2)
    assert testing.succeed(done, "direct")
    ok, _ = leases.finish_and_claim([_succeed(done, "again"), _succeed(other, None)], _spec(0))
    assert ok == [False, True]
    assert Run.objects.get(id=done.run_id).result == "direct"
    assert event_types(done.run_id) == ["run.created", "run.claimed", "run.succeeded"]
    run = Run.objects.get(id=other.run_id)
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, None)


def test_it_never_runs_inside_a_callers_transaction() -> None:
    from django.db import transaction

    (lease,) = _claimed(1)
    with transaction.atomic(), pytest.raises(RuntimeError):
        leases.finish_and_claim([_succeed(lease)], _spec(1))


def _race_a_sweeper_reclaim(hooks, write) -> tuple[leases.Lease, leases.Lease, Any]:
    """Run A's lease expires (0 s) and the sweeper reclaims it, holding its
    transaction open; the statement (A and B's finishes, and a claim) blocks
    on A's row and re-checks once the sweeper commits."""
    runqueue.submit(kind="k", payload={"run": "A"})
    lease_a = leases.claim_one("worker-1", lease_seconds=0)
    runqueue.submit(kind="k", payload={"run": "B"})
    lease_b = leases.claim_one("worker-1", lease_seconds=30)
    runqueue.submit(kind="k", payload={"run": "C"})
    assert lease_a.run.payload == {"run": "A"} and lease_b.run.payload == {"run": "B"}

    hooks.inside_sweep = Pause("sweeper")
    sweeper = Worker(leases.sweep, name="sweeper")
    sweeper.start()
    assert hooks.inside_sweep.inside.wait(30)

    group = Worker(lambda: write(lease_a, lease_b), name="group")
    group.start()
    group.started_fn.wait(30)
    wait_until(lambda: is_blocked(group.backend_pid), what="the statement to block")
    hooks.inside_sweep.release.set()
    assert [row[0] for row in sweeper.outcome()] == [lease_a.run_id]
    return lease_a, lease_b, group.outcome()


def _check_after_race(lease_a: leases.Lease, lease_b: leases.Lease) -> None:
    run_a = Run.objects.get(id=lease_a.run_id)
    assert (run_a.status, run_a.lease_epoch, run_a.result) == (RunStatus.QUEUED, 2, None)
    assert event_types(run_a.id, epoch=1) == ["run.claimed", "run.fenced"]
    run_b = Run.objects.get(id=lease_b.run_id)
    assert (run_b.status, run_b.result) == (RunStatus.SUCCEEDED, "B")
    assert event_types(run_b.id, epoch=1) == ["run.claimed", "run.succeeded"]
    # The next owner of A finishes it as usual.
    lease_a2 = leases.claim_one("worker-2", lease_seconds=30)
    assert (lease_a2.run_id, lease_a2.epoch) == (lease_a.run_id, 3)
    assert leases.finish_and_claim([_succeed(lease_a2, "A")], _spec(0))[0] == [True]
    assert event_types(run_a.id, epoch=3) == ["run.claimed", "run.succeeded"]


def test_racing_a_sweeper_reclaim_fences_only_the_reclaimed_row_and_still_claims(
    fast_retry, hooks
) -> None:
    lease_a, lease_b, (ok, claimed) = _race_a_sweeper_reclaim(
        hooks,
        lambda a, b: leases.finish_and_claim([_succeed(a, "A"), _succeed(b, "B")], _spec(1)),
    )
    assert ok == [False, True]
    assert [lease.run.payload for lease in claimed] == [{"run": "C"}]
    _check_after_race(lease_a, lease_b)


def test_at_repeatable_read_a_serialization_failure_retries_each_finish_alone(
    fast_retry, hooks, monkeypatch
) -> None:
    """At REPEATABLE READ the statement raises 40001 and wrote nothing, its
    claim included; each finish is then written alone, behind its own fence."""
    # The module, not the function runqueue.leases re-exports under its name.
    claim_module = importlib.import_module("runqueue.leases.claim")

    alone: list[str] = []

    def spy(lease: leases.Lease, *args: Any) -> Any:
        alone.append(lease.run.payload["run"])
        return fenced_transaction(lease, *args)

    fenced_transaction = claim_module.fenced_transaction
    monkeypatch.setattr(claim_module, "fenced_transaction", spy)

    def write(a: leases.Lease, b: leases.Lease) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ"
            )
        return leases.finish_and_claim([_succeed(a, "A"), _succeed(b, "B")], _spec(1))

    lease_a, lease_b, (ok, claimed) = _race_a_sweeper_reclaim(hooks, write)
    assert ok == [False, True]
    assert alone == ["A", "B"]
    assert claimed == []  # rolled back with the statement; the next round claims it
    assert Run.objects.get(payload={"run": "C"}).status == RunStatus.QUEUED
    _check_after_race(lease_a, lease_b)


def test_the_finishes_find_their_runs_by_id_whatever_the_statistics_say() -> None:
    from runqueue.leases.claim import statement_params
    from runqueue.sql import queries

    # Enough runs that reading the live partition whole costs more than
    # looking ten of them up by id.
    Run.objects.bulk_create([Run(kind="k", priority=10, payload={}) for _ in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
    held = leases.claim("w", [ASYNC], limit=500)
    params = statement_params([_succeed(lease) for lease in held[:10]], _spec(4))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + queries()["finish_and_claim"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # The finishes' scan: by id (the primary key), never the table, nor the
    # leased index's running range with the ids as a filter: statistics that
    # say nothing is running made that look cheap to PostgreSQL 15 (every
    # running run read per finish) until the index's predicate asked for the
    # owner too (migration 0038). (The claim's own plan, on the claim index,
    # is tests/database/claim/test_leases.py's.)
    finishes = plan.split("CTE finished", 1)[1].split("CTE joined", 1)[0]
    assert "Seq Scan on runqueue_run" not in finishes, plan
    assert "runqueue_run_leased_idx" not in finishes, plan
    assert "runqueue_run_key_idx" not in finishes, plan
    scans = [line for line in finishes.splitlines() if "Index Cond" in line]
    assert any("id = ANY" in line for line in scans), plan
