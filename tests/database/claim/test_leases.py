"""Claim, heartbeat, finish, give up, sweep and cancel against real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

import runqueue
from runqueue import leases, testing
from runqueue.errors import InvalidTransition, RunNotFound, ToolInvocationNotFound
from runqueue.leases.failures import Failure, FailureSummary, failure_summary
from runqueue.models import EventLog, PriorityClass, Run, RunStatus
from tests.helpers import Worker, event_types, expire_lease, numbered

pytestmark = pytest.mark.django_db

INTERACTIVE, ASYNC, MAINTENANCE = (
    PriorityClass.INTERACTIVE,
    PriorityClass.ASYNC,
    PriorityClass.MAINTENANCE,
)


def test_claim_sets_lease_epoch_attempts_and_logs_the_claim() -> None:
    sub = runqueue.submit(kind="k")
    lease = leases.claim_one("w1", lease_seconds=45)
    assert lease.run_id == sub.run.id
    run = Run.objects.get(id=sub.run.id)
    assert (run.status, run.lease_epoch, run.attempts, run.lease_owner) == (
        RunStatus.RUNNING,
        1,
        1,
        "w1",
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT lease_expires_at - now() FROM runqueue_run WHERE id = %s", [run.id])
        remaining = cursor.fetchone()[0]
    assert dt.timedelta(seconds=40) < remaining <= dt.timedelta(seconds=45)
    event = EventLog.objects.get(run_id=run.id, type="run.claimed")
    assert event.lease_epoch == 1
    assert event.data["owner"] == "w1" and event.data["attempt"] == 1
    assert event.data["wait_ms"] >= 0


def test_claims_come_out_by_priority_then_age() -> None:
    order = [("m1", 20), ("a1", 10), ("i1", 0), ("a2", 12), ("i2", 0), ("i3", 5)]
    for kind, priority in order:
        runqueue.submit(kind="k", payload={"name": kind}, priority=priority)
    claimed = []
    while lease := leases.claim_one("w1"):
        claimed.append(lease.run.payload["name"])
    assert claimed == ["i1", "i2", "i3", "a1", "a2", "m1"]


def test_a_slot_never_claims_outside_its_classes() -> None:
    for priority in (0, 5, 10, 15, 20, 25):
        runqueue.submit(kind="k", priority=priority)
    got_async = [lease.run.priority for lease in leases.claim("w", [ASYNC], limit=10)]
    got_maint = [lease.run.priority for lease in leases.claim("w", [MAINTENANCE], limit=10)]
    got_inter = [lease.run.priority for lease in leases.claim("w", [INTERACTIVE], limit=10)]
    assert (got_inter, got_async, got_maint) == ([0, 5], [10, 15], [20, 25])


def test_a_slot_shared_by_two_classes_claims_from_both_and_only_those() -> None:
    for priority in (0, 10, 20):
        runqueue.submit(kind="k", priority=priority)
    got = [lease.run.priority for lease in leases.claim("w", [INTERACTIVE, MAINTENANCE], limit=10)]
    assert got == [0, 20]


def test_future_scheduled_for_is_not_claimed() -> None:
    later = runqueue.submit(kind="k", scheduled_for=timezone.now() + dt.timedelta(hours=1))
    due = runqueue.submit(kind="k", scheduled_for=timezone.now() - dt.timedelta(seconds=1))
    assert [lease.run_id for lease in leases.claim("w", limit=10)] == [due.run.id]
    assert Run.objects.get(id=later.run.id).status == RunStatus.QUEUED


def test_batched_claim_claims_exactly_limit() -> None:
    for i in range(50):
        runqueue.submit(kind="k", payload={"i": i})
    batch = leases.claim("w", limit=7)
    assert len(batch) == 7
    assert Run.objects.filter(status=RunStatus.RUNNING).count() == 7
    assert EventLog.objects.filter(type="run.claimed").count() == 7


def test_claim_plan_uses_the_claim_index() -> None:
    """EXPLAIN after ANALYZE: the claim scans the partial claim index, and its
    subquery is run once (an InitPlan), not once per row."""
    Run.objects.bulk_create(
        [Run(kind="k", priority=random.choice([0, 10, 20]), payload={}) for _ in range(5000)]
    )
    Run.objects.filter(priority=10).update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    from runqueue.leases.claim import statement_params
    from runqueue.sql import queries

    spec = leases.claim_spec("w", [PriorityClass.INTERACTIVE], limit=10, lease_seconds=30)
    params = statement_params((), spec)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
        cursor.execute("EXPLAIN " + queries()["finish_and_claim"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "runqueue_run_claim_idx" in plan, plan
    assert "InitPlan" in plan, plan


def _generic_plan(name: str) -> str:
    """The plan a prepared ``name`` runs once PostgreSQL keeps one plan for
    every parameter value (``plan_cache_mode = force_generic_plan``)."""
    statement, names = numbered(name)
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE runqueue_generic_{name} AS {statement}")
        try:
            nulls = ", ".join(["NULL"] * len(names))
            cursor.execute(f"EXPLAIN (COSTS OFF) EXECUTE runqueue_generic_{name}({nulls})")
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute(f"DEALLOCATE runqueue_generic_{name}")
            cursor.execute("RESET plan_cache_mode")


def test_a_claims_generic_plan_reads_the_claim_index_in_order_without_a_join() -> None:
    """A worker's claim is a prepared statement: after a few runs PostgreSQL
    may keep one generic plan for it, made with whatever statistics the
    tables had. With many paused kinds in the statistics (or none: a table
    never analyzed is planned as ~50 rows) the pause test became a hash
    anti-join, whose rows come unordered, and the claim sorted every due run
    to take the first few. The test is a subplan per candidate (OFFSET 0):
    the plan reads the claim index in claim order and stops at the limit."""
    from runqueue.models import PausedKind

    Run.objects.bulk_create([Run(kind="k", priority=10, payload={}) for _ in range(3000)])
    PausedKind.objects.bulk_create(
        PausedKind(kind=f"other.{i}", paused_by="t", reason="r") for i in range(300)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
        cursor.execute("ANALYZE runqueue_paused_kind")
    for name in ("finish_and_claim", "claim"):
        plan = _generic_plan(name)
        # The claim's CTE, up to the next CTE of the statement.
        claim = re.split(r"\n\s*CTE ", plan[plan.index("CTE claimed") :])[0]
        assert "runqueue_run_claim_idx" in claim, plan
        assert "Sort" not in claim and "Hash" not in claim, plan
        assert "SubPlan" in claim, plan


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_claim_one_run_twice() -> None:
    n_runs, n_threads = 120, 8
    for i in range(n_runs):
        runqueue.submit(kind="k", payload={"i": i}, priority=random.choice([0, 10, 20]))
    barrier = threading.Barrier(n_threads)

    def drain(name: str) -> list:
        barrier.wait()
        got = []
        while batch := leases.claim(name, limit=random.choice([1, 3])):
            got.extend(lease.run_id for lease in batch)
        return got

    workers = [Worker(lambda n=f"w{i}": drain(n), name=f"w{i}") for i in range(n_threads)]
    for w in workers:
        w.start()
    claimed = [run_id for w in workers for run_id in w.outcome()]
    assert len(claimed) == n_runs
    assert len(set(claimed)) == n_runs
    assert Counter(Run.objects.values_list("lease_epoch", flat=True)) == {1: n_runs}
    assert EventLog.objects.filter(type="run.claimed").count() == n_runs


def test_heartbeat_renews_on_the_database_clock_and_is_false_once_fenced() -> None:
    sub = runqueue.submit(kind="k")
    lease = leases.claim_one("w1", lease_seconds=60)
    expire_lease(sub.run.id)
    assert leases.heartbeat(lease) is True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lease_expires_at - now() FROM runqueue_run WHERE id = %s", [sub.run.id]
        )
        assert cursor.fetchone()[0] > dt.timedelta(seconds=55)
    runqueue.cancel(sub.run.id, reason="user left", actor="tester")
    assert leases.heartbeat(lease) is False
    assert leases.heartbeat(lease) is False
    assert event_types(sub.run.id, epoch=1) == ["run.claimed", "run.fenced"]


def _pages(ids: list) -> dict:
    """Each run's heap page in the live partition (its row version's block)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, (ctid::text::point)[0]::int FROM runqueue_run_live WHERE id = ANY(%s)",
            [ids],
        )
        return dict(cursor.fetchall())


def _snapshots_of_others() -> int:
    """Other sessions of the server in a transaction (an xid or a snapshot):
    while one is, the row versions an update leaves behind may not be
    pruned. Any database's: this session's own snapshots take their xmin
    from every transaction running on the server."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_claims_and_heartbeats_of_a_packed_backlog_stay_on_their_pages() -> None:
    """The live partition's fillfactor (migration 0026) leaves room on each
    page of a backlog for its runs' claimed versions (longer than the queued
    ones: the lease's owner, token and times) and for their heartbeats'. A
    claimed version that goes to another page costs a second lock record
    and the whole tuple in the WAL; a heartbeat's is not a HOT update (an
    entry in every index of the partition): docs/performance.md, "A claim
    and a heartbeat on their own page". Each statement commits, as a
    worker's do, so the versions they leave behind can be pruned, unless
    another session of the server is in a transaction meanwhile (as beside
    other test suites): the claims' bound holds either way, the heartbeats'
    is asserted only when no other session was seen in one."""
    owner = "vm-8006-ac4229/async"  # a runworker's owner is as long
    runqueue.submit_many([runqueue.SubmitRequest(kind="k", payload={"i": i}) for i in range(600)])
    queued = _pages(list(Run.objects.values_list("id", flat=True)))
    held = []
    for _ in range(20):
        held += leases.claim(owner, limit=16)
    ids = [lease.run_id for lease in held]
    assert len(set(ids)) == 320
    claimed = _pages(ids)
    left = sum(claimed[run_id] != queued[run_id] for run_id in ids)
    # Fillfactor 80 (before 0026): 43 % of these claims left their page (83 %
    # with a snapshot held meanwhile); 50: 5 % (31 % with one held).
    assert left / len(ids) < 0.37, f"{left} of {len(ids)} claimed versions left their page"
    moved, beats, others = 0, 0, 0
    for _ in range(10):
        others += _snapshots_of_others()
        before = _pages(ids)
        assert leases.heartbeat_many(held) == []
        after = _pages(ids)
        moved += sum(after[run_id] != before[run_id] for run_id in ids)
        beats += len(ids)
    if others + _snapshots_of_others() == 0:
        # Fillfactor 80 moved 21 % of these heartbeats; 50 moves 5 %.
        assert moved / beats < 0.12, f"{moved} of {beats} heartbeats left their page"


def test_succeed_records_result_and_event() -> None:
    sub = runqueue.submit(kind="k", session_id="s1")
    lease = leases.claim_one("w1")
    assert testing.succeed(lease, {"answer": 42})
    run = Run.objects.get(id=sub.run.id)
    assert (run.status, run.result, run.lease_expires_at) == (
        RunStatus.SUCCEEDED,
        {"answer": 42},
        None,
    )
    assert run.finished_at is not None
    assert event_types(run.id) == ["run.created", "run.claimed", "run.succeeded"]
    # The session's slot is free again.
    assert runqueue.submit(kind="k", session_id="s1").outcome == "created"


def test_permanent_failure_is_never_retried(fast_retry) -> None:
    sub = runqueue.submit(kind="k")
    lease = leases.claim_one("w1")
    try:
        raise runqueue.PermanentError("card declined")
    except runqueue.PermanentError as exc:
        assert testing.fail(lease, leases.permanent_failure(exc, lease.attempt))
    run = Run.objects.get(id=sub.run.id)
    assert run.status == RunStatus.FAILED
    assert run.failure["classification"] == "permanent"
    assert run.failure["error_type"] == "PermanentError"
    assert "card declined" in run.failure["traceback"]
    assert leases.sweep() == []
    assert leases.claim_one("w2") is None
    assert Run.objects.get(id=sub.run.id).attempts == 1


def test_give_up_requeues_with_backoff_then_dead_letters(settings) -> None:
    settings.RUNQUEUE = {"BACKOFF_BASE_SECONDS": 30, "BACKOFF_JITTER": 0}
    sub = runqueue.submit(kind="k", max_attempts=2)
    lease = leases.claim_one("w1")
    assert leases.give_up(lease, runqueue.TransientError("rate limited"))
    run = Run.objects.get(id=sub.run.id)
    assert (run.status, run.lease_epoch, run.attempts) == (RunStatus.QUEUED, 2, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT scheduled_for - now() FROM runqueue_run WHERE id = %s", [run.id])
        assert dt.timedelta(seconds=25) < cursor.fetchone()[0] <= dt.timedelta(seconds=30)
    assert leases.claim_one("w1") is None  # not due yet

    Run.objects.filter(id=run.id).update(scheduled_for=None)
    lease = leases.claim_one("w2")
    assert (lease.epoch, lease.attempt) == (3, 2)
    assert leases.give_up(lease, runqueue.TransientError("rate limited again"))
    run = Run.objects.get(id=sub.run.id)
    assert run.status == RunStatus.FAILED
    assert run.failure["classification"] == "transient"
    assert run.failure["attempt"] == 2
    assert event_types(run.id) == [
        "run.created",
        "run.claimed",
        "run.requeued",
        "run.claimed",
        "run.failed",
    ]


def test_sweep_requeues_expired_leases_with_backoff(settings) -> None:
    settings.RUNQUEUE = {"BACKOFF_BASE_SECONDS": 60, "BACKOFF_JITTER": 0}
    sub = runqueue.submit(kind="k")
    lease = leases.claim_one("w1")
    assert leases.sweep() == []  # not expired yet
    expire_lease(sub.run.id)
    [(run_id, status, epoch, attempts)] = leases.sweep()
    assert (run_id, status, epoch, attempts) == (sub.run.id, RunStatus.QUEUED, 2, 1)
    run = Run.objects.get(id=sub.run.id)
    assert run.scheduled_for > timezone.now() + dt.timedelta(seconds=50)
    assert run.lease_owner == "" and run.lease_expires_at is None
    requeued = EventLog.objects.get(run_id=run.id, type="run.requeued")
    assert requeued.data["reason"] == "lease_expired" and requeued.data["expired_epoch"] == 1
    # The old owner is fenced now.
    assert testing.succeed(lease, "late") is False
    assert Run.objects.get(id=sub.run.id).status == RunStatus.QUEUED


def test_sweep_dead_letters_at_max_attempts(fast_retry) -> None:
    sub = runqueue.submit(kind="k")
    for attempt in (1, 2, 3):
        lease = leases.claim_one("w")
        assert lease.attempt == attempt
        expire_lease(sub.run.id)
        leases.sweep()
    run = Run.objects.get(id=sub.run.id)
    assert run.status == RunStatus.FAILED
    assert run.failure["classification"] == "lease_expired"
    assert run.failure["message"] == "lease expired on attempt 3 of 3"
    assert run.failure["attempt"] == 3
    assert leases.claim_one("w") is None  # never a fourth claim
    assert event_types(run.id).count("run.claimed") == 3
    assert event_types(run.id)[-1] == "run.failed"


@pytest.mark.parametrize("how", ["swept", "gave_up", "failed"])
def test_every_stored_failure_has_exactly_the_failure_keys(how: str, fast_retry) -> None:
    """The sweeper's, a give-up's and a handler's dead letters alike are a
    ``Failure``; their ``run.failed`` event carries its summary."""
    sub = runqueue.submit(kind="k", max_attempts=1)
    lease = leases.claim_one("w")
    if how == "swept":
        expire_lease(sub.run.id)
        assert [row[1] for row in leases.sweep()] == [RunStatus.FAILED]
    elif how == "gave_up":
        assert leases.give_up(lease, runqueue.TransientError("rate limited"))
    else:
        assert testing.fail(lease, leases.permanent_failure(ValueError("bad"), lease.attempt))
    run = Run.objects.get(id=sub.run.id)
    assert run.status == RunStatus.FAILED
    assert set(run.failure) == Failure.__required_keys__ == set(Failure.__annotations__)
    failed = EventLog.objects.get(run_id=run.id, type="run.failed")
    if how == "swept":
        assert run.failure == {
            "classification": "lease_expired",
            "error_type": "LeaseExpired",
            "message": "lease expired on attempt 1 of 1",
            "traceback": None,
            "attempt": 1,
        }
        assert set(failed.data) == {"reason", "attempt", "expired_epoch", "scheduled_for"}
    else:
        assert failed.data == failure_summary(run.failure)
        assert set(failed.data) == set(FailureSummary.__annotations__)


@pytest.mark.parametrize(
    "action", [testing.succeed, leases.heartbeat], ids=["succeed", "heartbeat"]
)
def test_sweeper_rechecks_what_it_read(action) -> None:
    """River #1302's race: the run is finished (or renewed) between the
    sweeper's read and its update; the update must change nothing."""
    sub = runqueue.submit(kind="k")
    lease = leases.claim_one("w1", lease_seconds=30)
    expire_lease(sub.run.id)

    def owner_acts(rows) -> None:
        assert [r[0] for r in rows] == [sub.run.id]
        assert action(lease)

    assert leases.sweep(after_read=owner_acts) == []
    run = Run.objects.get(id=sub.run.id)
    assert run.lease_epoch == 1
    assert run.status == (RunStatus.SUCCEEDED if action is testing.succeed else RunStatus.RUNNING)
    assert "run.requeued" not in event_types(run.id)


def test_cancel_fences_a_running_worker_and_frees_the_session() -> None:
    sub = runqueue.submit(kind="k", session_id="s1")
    lease = leases.claim_one("w1")
    run = runqueue.cancel(sub.run.id, reason="user stopped it", actor="support:ann")
    assert (run.status, run.lease_epoch) == (RunStatus.CANCELLED, 2)
    cancelled = EventLog.objects.get(run_id=run.id, type="run.cancelled")
    assert cancelled.data == {"reason": "user stopped it", "actor": "support:ann"}
    assert leases.checkpoint(lease, {"step": 2}) is False
    assert runqueue.submit(kind="k", session_id="s1").outcome == "created"


def test_cancel_errors() -> None:
    import uuid

    with pytest.raises(RunNotFound):
        runqueue.cancel(uuid.uuid4(), reason="x", actor="y")
    sub = runqueue.submit(kind="k")
    runqueue.cancel(sub.run.id, reason="x", actor="y")
    with pytest.raises(InvalidTransition) as excinfo:
        runqueue.cancel(sub.run.id, reason="x", actor="y")
    assert str(excinfo.value) == f"cannot cancel run {sub.run.id}: it is cancelled"


def test_resolving_a_missing_tool_invocation_names_the_error() -> None:
    with pytest.raises(ToolInvocationNotFound) as excinfo:
        leases.resolve_uncertain(2**31 - 1, happened=True, note="n", actor="a")
    assert isinstance(excinfo.value, LookupError)  # what callers caught before
    assert excinfo.value.tool_invocation_id == 2**31 - 1
    assert str(excinfo.value) == f"no tool invocation {2**31 - 1}"


def test_backoff_curve_is_exponential_capped_and_jittered(settings) -> None:
    settings.RUNQUEUE = {
        "BACKOFF_BASE_SECONDS": 2,
        "BACKOFF_MAX_SECONDS": 60,
        "BACKOFF_JITTER": 0.2,
    }
    rng = random.Random(7)
    for attempts, nominal in [(1, 2), (2, 4), (3, 8), (5, 32), (6, 60), (30, 60)]:
        samples = [leases.backoff(attempts, rng=rng) for _ in range(200)]
        assert nominal * 0.8 <= min(samples) and max(samples) < nominal * 1.2
        assert max(samples) - min(samples) > nominal * 0.2  # jitter spreads retries


def test_a_spent_lease_writes_nothing_and_is_not_called_fenced() -> None:
    """A heartbeat that lands just after its own run finished is not a fencing."""
    sub = runqueue.submit(kind="k")
    lease = leases.claim_one("w1")
    assert testing.succeed(lease, {"ok": True})
    assert leases.heartbeat(lease) is False
    assert leases.checkpoint(lease, {"late": True}) is False
    assert lease.closed and not lease.fenced
    assert event_types(sub.run.id) == ["run.created", "run.claimed", "run.succeeded"]


def test_fences_find_the_run_by_id_whatever_the_statistics_say() -> None:
    """Statistics taken while runs were queued say nothing is running; the
    fence still goes to the run by id, never walks the running runs."""
    from runqueue.sql import queries

    Run.objects.bulk_create([Run(kind="k", priority=10, payload={}) for _ in range(500)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
    held = leases.claim("w", [ASYNC], limit=500)
    assert len(held) == 500
    params = {
        "run_id": held[250].run_id,
        "epoch": 1,
        "token": held[250].token,
        "idle_timeout": "15s",
        "lease_seconds": 30.0,
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + queries()["fence_renew"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "runqueue_run_claim_idx" not in plan, plan
    assert "Index Cond" in plan and "id =" in plan, plan


@pytest.mark.django_db(transaction=True)
def test_a_claim_is_never_nested_in_a_callers_transaction() -> None:
    from django.db import transaction

    runqueue.submit(kind="k")
    with transaction.atomic(), pytest.raises(RuntimeError):
        leases.claim_one("w")
    lease = leases.claim_one("w")  # outside: one statement, committed
    assert event_types(lease.run_id) == ["run.created", "run.claimed"]
