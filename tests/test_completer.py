"""The worker's completer: finishes written in batches, one statement each
(``fence_finish_batch``), every row behind its own fence. A fenced row
writes nothing but ``run.fenced``; the others commit with their events.
Races use real connections and hooks, as tests/test_fencing.py does."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

import runqueue
from runqueue import leases
from runqueue.models import PriorityClass, Run, RunEvent, RunStatus
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.helpers import Worker, event_types, expire_lease, is_blocked, wait_until
from tests.test_fencing import Pause

pytestmark = pytest.mark.django_db(transaction=True)

ASYNC = PriorityClass.ASYNC


@runqueue.handler("test.completer_noop")
def completer_noop(ctx: runqueue.RunContext) -> dict:
    return {"i": ctx.payload["i"]}


def _succeed(lease: leases.Lease, result: Any = None) -> leases.Finish:
    return leases.Finish(lease, "succeed", leases.succeed_params(lease, result))


def _fail(lease: leases.Lease, message: str) -> leases.Finish:
    failure = leases.permanent_failure(ValueError(message), lease.attempt)
    return leases.Finish(lease, "fail", leases.fail_params(lease, failure))


def _claimed(n: int, *, lease_seconds: float = 30) -> list[leases.Lease]:
    for i in range(n):
        runqueue.submit(kind="k", payload={"i": i})
    held = leases.claim("w", leases.ALL_CLASSES, limit=n, lease_seconds=lease_seconds)
    assert len(held) == n
    return held


def test_a_batch_commits_its_unfenced_rows_and_only_run_fenced_for_the_fenced() -> None:
    first, stale, last = _claimed(3)
    # The sweeper reclaims one of them: its epoch moves on, its lease is fenced.
    expire_lease(stale.run_id)
    assert [row[1] for row in leases.sweep()] == [RunStatus.QUEUED]

    ok = leases.finish_many(
        [_succeed(first, {"n": 1}), _succeed(stale, {"n": 2}), _fail(last, "x")]
    )

    assert ok == [True, False, True]
    assert (first.closed, stale.fenced, last.closed) == (True, True, True)
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
    fenced = RunEvent.objects.get(run_id=stale.run_id, type="run.fenced")
    assert fenced.data["action"] == "succeed" and fenced.data["current_epoch"] == 2
    assert runs[last.run_id].status == RunStatus.FAILED
    assert runs[last.run_id].failure["message"] == "x"
    assert event_types(last.run_id, epoch=1) == ["run.claimed", "run.failed"]
    failed = RunEvent.objects.get(run_id=last.run_id, type="run.failed")
    assert failed.data["error_type"] == "ValueError" and "traceback" not in failed.data


def test_a_spent_lease_in_a_batch_writes_nothing_and_is_not_called_fenced() -> None:
    done, other = _claimed(2)
    assert leases.succeed(done, "direct")
    assert leases.finish_many([_succeed(done, "again"), _succeed(other, None)]) == [False, True]
    assert Run.objects.get(id=done.run_id).result == "direct"
    assert event_types(done.run_id) == ["run.created", "run.claimed", "run.succeeded"]
    run = Run.objects.get(id=other.run_id)
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, None)


def test_a_batch_never_runs_inside_a_callers_transaction() -> None:
    from django.db import transaction

    (lease,) = _claimed(1)
    with transaction.atomic(), pytest.raises(RuntimeError):
        leases.finish_batch([_succeed(lease)])


def _race_a_sweeper_reclaim(hooks, write_batch) -> tuple[leases.Lease, leases.Lease, list]:
    """Run A's lease expires (0 s) and the sweeper reclaims it, holding its
    transaction open; the batch (A and B's finishes) blocks on A's row and
    re-checks once the sweeper commits."""
    runqueue.submit(kind="k", payload={"run": "A"})
    lease_a = leases.claim_one("worker-1", lease_seconds=0)
    runqueue.submit(kind="k", payload={"run": "B"})
    lease_b = leases.claim_one("worker-1", lease_seconds=30)
    assert lease_a.run.payload == {"run": "A"} and lease_b.run.payload == {"run": "B"}

    hooks.inside_sweep = Pause("sweeper")
    sweeper = Worker(leases.sweep, name="sweeper")
    sweeper.start()
    assert hooks.inside_sweep.inside.wait(30)

    completer = Worker(lambda: write_batch(lease_a, lease_b), name="completer")
    completer.start()
    completer.started_fn.wait(30)
    wait_until(lambda: is_blocked(completer.backend_pid), what="the batch to block")
    hooks.inside_sweep.release.set()
    assert [row[0] for row in sweeper.outcome()] == [lease_a.run_id]
    return lease_a, lease_b, completer.outcome()


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
    assert leases.finish_many([_succeed(lease_a2, "A")]) == [True]
    assert event_types(run_a.id, epoch=3) == ["run.claimed", "run.succeeded"]


def test_a_batch_racing_a_sweeper_reclaim_fences_only_the_reclaimed_row(fast_retry, hooks) -> None:
    lease_a, lease_b, ok = _race_a_sweeper_reclaim(
        hooks, lambda a, b: leases.finish_many([_succeed(a, "A"), _succeed(b, "B")])
    )
    assert ok == [False, True]
    _check_after_race(lease_a, lease_b)


def test_a_batch_at_repeatable_read_is_retried_alone_after_a_serialization_failure(
    fast_retry, hooks, monkeypatch
) -> None:
    """At REPEATABLE READ the batch raises 40001 and wrote nothing; each
    finish is then written alone, behind its own fence."""
    from runqueue.leases import batch

    alone: list[str] = []

    def spy(lease: leases.Lease, *args: Any) -> Any:
        alone.append(lease.run.payload["run"])
        return fenced_transaction(lease, *args)

    fenced_transaction = batch._fenced_transaction
    monkeypatch.setattr(batch, "_fenced_transaction", spy)

    def write(a: leases.Lease, b: leases.Lease) -> list[bool]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ"
            )
        return leases.finish_many([_succeed(a, "A"), _succeed(b, "B")])

    lease_a, lease_b, ok = _race_a_sweeper_reclaim(hooks, write)
    assert ok == [False, True]
    assert alone == ["A", "B"]
    _check_after_race(lease_a, lease_b)


def test_the_batch_finds_its_runs_by_id_whatever_the_statistics_say() -> None:
    from runqueue.sql import queries

    Run.objects.bulk_create([Run(kind="k", priority=10, payload={}) for _ in range(500)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
    held = leases.claim("w", [ASYNC], limit=500)
    params = {
        "ids": [lease.run_id for lease in held[:10]],
        "epochs": [1] * 10,
        "statuses": ["succeeded"] * 10,
        "results": ["null"] * 10,
        "failures": [None] * 10,
        "event_types": ["run.succeeded"] * 10,
        "event_data": ["{}"] * 10,
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + queries()["fence_finish_batch"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on runqueue_run " not in plan, plan
    # PostgreSQL 18 looks the runs up by id (the primary key). PostgreSQL 15,
    # trusting statistics that say nothing is running, may walk the leased
    # index for status = 'running' with the ids as a filter: still an index,
    # never the table, and right again once autovacuum analyzes.
    scans = [line for line in plan.splitlines() if "Index Cond" in line]
    assert any("id = ANY" in line or "'running'" in line for line in scans), plan


def _pool(worker_id: str, *, burst: bool = True) -> Pool:
    return Pool(PoolConfig(slots=(SlotSpec.parse("async=4"),), burst=burst, worker_id=worker_id))


def test_a_pool_with_the_completer_drains_every_run_exactly_once() -> None:
    ok_runs = [
        runqueue.submit(kind="test.completer_noop", payload={"i": i}, priority=ASYNC).run.id
        for i in range(60)
    ]
    failing = [
        runqueue.submit(kind="test.fail", payload={"error": "permanent"}, priority=ASYNC).run.id
        for _ in range(8)
    ]
    pool = _pool("completer-drain")
    assert pool.run() == 0

    assert pool.completer.finishes == 68
    assert pool.held() == []
    for run in Run.objects.filter(id__in=ok_runs):
        assert (run.status, run.result, run.lease_epoch) == (RunStatus.SUCCEEDED, run.payload, 1)
    assert Run.objects.filter(id__in=failing, status=RunStatus.FAILED).count() == 8
    everything = ok_runs + failing
    for event_type, runs in (
        ("run.claimed", everything),
        ("run.succeeded", ok_runs),
        ("run.failed", failing),
    ):
        per_run = RunEvent.objects.filter(run_id__in=everything, type=event_type)
        assert per_run.count() == len(runs)
        assert set(per_run.values_list("run_id", flat=True)) == set(runs)
    assert not RunEvent.objects.filter(run_id__in=everything, type="run.fenced").exists()


def test_a_handed_over_finish_keeps_its_lease_held_until_the_batch_committed() -> None:
    (lease,) = _claimed(1)
    pool = _pool("completer-hold", burst=False)
    pool.hold(lease)
    pool.completer.start()
    try:
        # The completer cannot write while this lease's write lock is taken
        # (as when its heartbeat is being written).
        with lease._write_lock:
            assert pool.completer.succeed(lease, {"done": True}) is None
            assert lease in pool.held()
            assert Run.objects.get(id=lease.run_id).status == RunStatus.RUNNING
        wait_until(lambda: lease not in pool.held(), what="the batch to commit")
        run = Run.objects.get(id=lease.run_id)
        assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"done": True})
        assert lease.closed and not lease.fenced
    finally:
        pool.completer.close(30)
    assert not pool.completer.is_alive()
    # Closed: a later finish is written by its caller, alone.
    (late,) = _claimed(1)
    assert pool.completer.succeed(late, "late") is True
    assert Run.objects.get(id=late.run_id).status == RunStatus.SUCCEEDED


def _idle_in_transaction_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        return cursor.fetchone()[0]


def test_worker_connections_end_frozen_transactions_and_only_while_the_pool_runs() -> None:
    """While a pool runs, its connections end a transaction left idle for
    half a lease; once it stopped, new connections keep the server's value."""
    seen: list[str] = []

    @runqueue.handler("test.show_idle_timeout")
    def _show(ctx) -> None:
        seen.append(_idle_in_transaction_timeout())

    runqueue.submit(kind="test.show_idle_timeout", priority=ASYNC)
    assert _pool("idle-timeout").run() == 0
    assert seen == ["15s"]  # half the default 30 s lease
    connection.close()
    assert _idle_in_transaction_timeout() == "0"
