"""ADR-0004's hard gate: two workers race on one run with the reclaim
interval driven to zero; one commits all its transitions, the other writes
nothing but ``run.fenced``. Checked on every worker write path, with real
concurrent connections and deterministic interleavings (a second
connection holds a row lock, or a hook pauses the sweeper inside its
transaction; ``pg_blocking_pids`` shows who waits).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

import runqueue
from runqueue import leases, testing
from runqueue.models import Checkpoint, EventLog, Run, RunStatus, ToolInvocation
from tests.helpers import Worker, event_types, is_blocked, wait_until
from tests.pooling import not_through_a_pooler

pytestmark = pytest.mark.django_db(transaction=True)


def _start_tool(lease: leases.Lease) -> bool:
    return leases.record_tool_started(
        lease, seq=0, tool="charge_card", idempotency="non_idempotent", arguments={"cents": 500}
    )


#: name -> (prepare the lease before the race, the write that races, status after it)
WRITE_PATHS: dict[str, tuple[Callable | None, Callable[[leases.Lease], bool], str]] = {
    "heartbeat": (None, leases.heartbeat, RunStatus.RUNNING),
    "checkpoint": (None, lambda lease: leases.checkpoint(lease, {"step": 1}), RunStatus.RUNNING),
    "tool_started": (None, _start_tool, RunStatus.RUNNING),
    "tool_outcome": (
        _start_tool,
        lambda lease: leases.record_tool_outcome(
            lease, seq=0, status="completed", result={"ok": 1}
        ),
        RunStatus.RUNNING,
    ),
    "succeed": (
        None,
        lambda lease: testing.succeed(lease, {"by": lease.owner}),
        RunStatus.SUCCEEDED,
    ),
    "fail": (
        None,
        lambda lease: testing.fail(
            lease, leases.permanent_failure(ValueError("bad"), lease.attempt)
        ),
        RunStatus.FAILED,
    ),
    "give_up": (None, lambda lease: leases.give_up(lease, ValueError("flaky")), RunStatus.QUEUED),
    "wait_for_user": (
        None,
        lambda lease: leases.wait_for_user(lease, {"ask": "?"}, state={"s": 1}),
        RunStatus.WAITING_FOR_USER,
    ),
}


def _rows_written_at(run_id, epoch: int) -> dict[str, list]:
    return {
        "events": list(
            EventLog.objects.filter(run_id=run_id, lease_epoch=epoch)
            .order_by("id")
            .values_list("type", flat=True)
        ),
        "checkpoints": list(
            Checkpoint.objects.filter(run_id=run_id, lease_epoch=epoch).values_list(
                "seq", flat=True
            )
        ),
        "tools": list(
            ToolInvocation.objects.filter(run_id=run_id, lease_epoch=epoch).values_list(
                "status", flat=True
            )
        ),
    }


class Pause:
    """Pause one named thread inside a transaction until released."""

    def __init__(self, thread_name: str) -> None:
        self.thread_name = thread_name
        self.inside = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args) -> None:
        if threading.current_thread().name == self.thread_name:
            self.inside.set()
            assert self.release.wait(30), "never released"


def _claimed_run(settings) -> tuple[Run, leases.Lease]:
    settings.RUNQUEUE = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
    sub = runqueue.submit(kind="agent.turn", session_id="s1", max_attempts=5)
    # Lease of zero seconds: the reclaim interval driven to zero.
    lease_a = leases.claim_one("worker-A", lease_seconds=0)
    assert lease_a.epoch == 1
    return sub.run, lease_a


@pytest.mark.parametrize("path", list(WRITE_PATHS))
def test_reclaim_first_the_stale_worker_writes_nothing(path: str, settings, hooks) -> None:
    prepare, write, status_after = WRITE_PATHS[path]
    run, lease_a = _claimed_run(settings)
    if prepare:
        assert prepare(lease_a)
    before = _rows_written_at(run.id, 1)

    # The sweeper reclaims the run and holds its transaction open.
    hooks.inside_sweep = Pause("sweeper")
    sweeper = Worker(leases.sweep, name="sweeper")
    sweeper.start()
    assert hooks.inside_sweep.inside.wait(30)

    # Worker A's write blocks on the sweeper's row lock...
    worker_a = Worker(lambda: write(lease_a), name="worker-A")
    worker_a.start()
    worker_a.started_fn.wait(30)
    wait_until(lambda: is_blocked(worker_a.backend_pid), what="worker A to block")
    # ...and re-checks to zero rows once the sweeper commits.
    hooks.inside_sweep.release.set()
    assert [row[1] for row in sweeper.outcome()] == [RunStatus.QUEUED]
    assert worker_a.outcome() is False

    # Worker B claims the run and makes the same transition.
    lease_b = leases.claim_one("worker-B", lease_seconds=30)
    assert lease_b.epoch == 3
    if prepare:
        assert prepare(lease_b)
    assert write(lease_b) is True

    after = _rows_written_at(run.id, 1)
    assert after["events"] == before["events"] + ["run.fenced"]
    assert after["checkpoints"] == before["checkpoints"] == []
    assert after["tools"] == []
    run.refresh_from_db()
    assert run.status == status_after
    assert run.lease_epoch == (4 if path == "give_up" else 3)
    fenced = EventLog.objects.get(run_id=run.id, type="run.fenced")
    assert fenced.data["owner"] == "worker-A"
    assert fenced.data["current_epoch"] == 2
    # B committed all its transitions, each with B's epoch (give_up's requeue
    # carries the epoch it moved the run to).
    b_events = list(
        EventLog.objects.filter(run_id=run.id, lease_epoch__gte=3)
        .exclude(type="run.claimed")
        .order_by("id")
        .values_list("type", flat=True)
    )
    assert b_events == B_EVENTS[path]


B_EVENTS = {
    "heartbeat": [],
    "checkpoint": ["run.checkpointed"],
    "tool_started": ["tool.started"],
    "tool_outcome": ["tool.started", "tool.completed"],
    "succeed": ["run.succeeded"],
    "fail": ["run.failed"],
    "give_up": ["run.requeued"],
    "wait_for_user": ["run.checkpointed", "run.waiting"],
}


FINISHING = ["succeed", "fail", "give_up", "wait_for_user"]


@pytest.mark.parametrize("path", list(WRITE_PATHS))
def test_write_first_the_sweeper_steps_over_then_rechecks(
    path: str, settings, raw_connect
) -> None:
    prepare, write, status_after = WRITE_PATHS[path]
    run, lease_a = _claimed_run(settings)
    if prepare:
        assert prepare(lease_a)

    # A's write is under way on the run row: a second connection holds the
    # row's lock (as a write's open transaction does) and A's fence waits on it.
    holder = raw_connect(autocommit=False)
    holder.execute("SELECT 1 FROM runqueue_run WHERE id = %s FOR NO KEY UPDATE", [run.id])
    worker_a = Worker(lambda: write(lease_a), name="worker-A")
    worker_a.start()
    worker_a.started_fn.wait(30)
    wait_until(lambda: is_blocked(worker_a.backend_pid), what="worker A to block")

    # The sweeper steps over the row being written: it neither waits nor
    # moves it.
    assert leases.sweep() == []
    holder.rollback()
    assert worker_a.outcome() is True
    swept = leases.sweep()

    run.refresh_from_db()
    if path in FINISHING:
        # A finished first: the sweeper's re-check matches nothing.
        assert swept == []
        assert run.status == status_after
        assert run.lease_epoch == (2 if path == "give_up" else 1)
        assert "run.fenced" not in event_types(run.id)
    else:
        # A's write was legitimate; the lease (0 s) is still expired, so the
        # sweeper requeues it afterwards and A's next write is fenced.
        assert [row[1] for row in swept] == [RunStatus.QUEUED]
        assert leases.heartbeat(lease_a) is False
        assert event_types(run.id, epoch=1)[-1] == "run.fenced"


@not_through_a_pooler(
    "SET SESSION CHARACTERISTICS would reach one pooled server connection, not the"
    " transaction of the write, and be left there for the next client"
)
def test_repeatable_read_serialization_failure_means_fenced(settings, hooks) -> None:
    """At REPEATABLE READ the stale write raises 40001 instead of matching zero
    rows; the fence maps it to "fenced" after re-reading, never retries."""
    run, lease_a = _claimed_run(settings)
    hooks.inside_sweep = Pause("sweeper")
    sweeper = Worker(leases.sweep, name="sweeper")
    sweeper.start()
    assert hooks.inside_sweep.inside.wait(30)

    def write_at_repeatable_read() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ"
            )
        return testing.succeed(lease_a, "stale")

    worker_a = Worker(write_at_repeatable_read, name="worker-A")
    worker_a.start()
    worker_a.started_fn.wait(30)
    wait_until(lambda: is_blocked(worker_a.backend_pid), what="worker A to block")
    hooks.inside_sweep.release.set()
    sweeper.outcome()
    assert worker_a.outcome() is False
    run.refresh_from_db()
    assert (run.status, run.lease_epoch, run.result) == (RunStatus.QUEUED, 2, None)
    assert event_types(run.id, epoch=1) == ["run.claimed", "run.fenced"]


def test_cancel_while_a_worker_writes_fences_it(settings) -> None:
    run, lease_a = _claimed_run(settings)
    canceller = Worker(lambda: runqueue.cancel(run.id, reason="stop", actor="ops"), name="cancel")
    # Cancel first, holding nothing: the worker's next write is fenced.
    canceller.start()
    canceller.outcome()
    assert leases.checkpoint(lease_a, {"x": 1}) is False
    assert testing.succeed(lease_a, "late") is False
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.CANCELLED, None)
    assert event_types(run.id, epoch=1) == ["run.claimed", "run.fenced"]


def test_the_fence_hook_observes_and_never_changes_the_path(settings, hooks) -> None:
    """A hook set or not, a fence alone is one autocommit statement (the hook
    is not called: there is no transaction to pause in); a write that needs a
    transaction calls it inside, after the fence row."""
    run, lease = _claimed_run(settings)
    seen: list[tuple[str, bool]] = []
    hooks.inside_fence = lambda _lease, action: seen.append((action, connection.in_atomic_block))
    assert leases.heartbeat(lease)
    assert seen == []
    assert leases.checkpoint(lease, {"step": 1})
    assert seen == [("checkpoint", True)]
    assert testing.succeed(lease, "done")
    assert seen == [("checkpoint", True)]
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
