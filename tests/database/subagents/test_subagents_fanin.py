"""The fan-in across a dead letter: a parent an operator requeues counts
its children from their statuses, exactly, however their transitions
interleave with the requeue (real connections, many times over, and the
hard interleavings forced with a transaction held open)."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, transaction

import runqueue
from runqueue import leases, runtime, testing
from runqueue.leases.failures import failure_record
from runqueue.leases.outcomes import Succeeded, Suspended
from runqueue.leases.writes import finish_params
from runqueue.models import EventLog, PriorityClass, Run
from runqueue.sql import execute
from tests.helpers import Worker, is_blocked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

INTER, ASYNC = PriorityClass.INTERACTIVE, PriorityClass.ASYNC


def _failure():
    return failure_record(ValueError("boom"), classification="permanent", attempt=1)


def _dead_parent(n: int) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """A parent that spawned ``n`` async children and was dead-lettered
    before it waited for them."""
    runqueue.submit(kind="test.fanout", payload={})
    lease = leases.claim_one("w1", [INTER])
    assert lease is not None
    ctx = runtime.build_context(lease)
    children = [ctx.spawn("test.echo", {"i": i}, priority=ASYNC) for i in range(n)]
    assert testing.fail(lease, _failure())
    return lease.run_id, children


def _replay_and_wait(parent: uuid.UUID, n: int) -> Run:
    """Claim the requeued parent, replay its spawns, wait for the children:
    what the run is then."""
    lease = leases.claim_one("w1", [INTER])
    assert lease is not None and lease.run_id == parent
    ctx = runtime.build_context(lease)
    [ctx.spawn("test.echo", {"i": i}, priority=ASYNC) for i in range(n)]
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    return Run.objects.get(id=parent)


def _resumes(run_id: uuid.UUID) -> int:
    return EventLog.objects.filter(run_id=run_id, type="run.resumed").count()


def _together(*fns) -> list:
    barrier = threading.Barrier(len(fns))

    def at_barrier(fn):
        def run():
            barrier.wait(10)
            return fn()

        return run

    workers = [Worker(at_barrier(fn), name=f"racer-{i}") for i, fn in enumerate(fns)]
    for w in workers:
        w.start()
    return [w.outcome() for w in workers]


def test_a_requeued_parent_counts_children_that_ended_while_it_was_dead() -> None:
    parent, children = _dead_parent(2)
    first, second = leases.claim("c", [ASYNC], limit=2)
    assert testing.succeed(first, {"ok": 1})  # its parent is failed now
    runqueue.leases.requeue(parent, actor="op")
    assert Run.objects.get(id=parent).children_open == 1  # the second is open
    waiting = _replay_and_wait(parent, 2)
    assert (waiting.status, waiting.wait_reason) == ("waiting", "children")
    assert testing.succeed(second, {"ok": 2})
    resumed = Run.objects.get(id=parent)
    assert (resumed.status, resumed.children_open, _resumes(parent)) == ("queued", 0, 1)


def test_a_requeued_parent_whose_children_all_ended_resumes_at_once() -> None:
    parent, _children = _dead_parent(1)
    (child,) = leases.claim("c", [ASYNC], limit=1)
    assert testing.succeed(child, {"ok": 1})
    runqueue.leases.requeue(parent, actor="op")
    assert Run.objects.get(id=parent).children_open == 0
    run = _replay_and_wait(parent, 1)
    assert (run.status, run.children_open, _resumes(parent)) == ("queued", 0, 1)


def test_a_wait_for_children_counts_them_from_their_statuses() -> None:
    """A count left wrong (a parent requeued by an older version kept the
    count it died with) does not hold the wait: it counts the children."""
    runqueue.submit(kind="test.fanout", payload={})
    lease = leases.claim_one("w1", [INTER])
    ctx = runtime.build_context(lease)
    ctx.spawn("test.echo", {"i": 0}, priority=ASYNC)
    open_child = ctx.spawn("test.echo", {"i": 1}, priority=ASYNC)
    (first,) = leases.claim("c", [ASYNC], limit=1)
    assert testing.succeed(first, {"ok": 1})
    Run.objects.filter(id=lease.run_id).update(children_open=7)
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    waiting = Run.objects.get(id=lease.run_id)
    assert (waiting.status, waiting.children_open) == ("waiting", 1)
    runqueue.cancel(open_child, reason="t", actor="t", cascade=False)
    resumed = Run.objects.get(id=lease.run_id)
    assert (resumed.status, resumed.children_open, _resumes(lease.run_id)) == ("queued", 0, 1)


def _finish_one_way(i: int):
    """The ways a child ends (a finish alone, with a claim, a dead letter, a
    cancel), one per iteration in turn."""
    spec = leases.claim_spec("f", [ASYNC], limit=0)
    ways = [
        lambda c: testing.succeed(c, {"i": i}),
        lambda c: leases.finish_and_claim([(c, Succeeded.of({"i": i}))], spec)[0][0],
        lambda c: testing.fail(c, _failure()),
        lambda c: (
            runqueue.cancel(c.run_id, reason="t", actor="t", cascade=False).status == "cancelled"
        ),
    ]
    return ways[i % len(ways)]


@pytest.mark.parametrize("iteration", range(24))
def test_a_child_ending_while_its_parent_is_requeued_is_counted_once(iteration: int) -> None:
    """The child's terminal transition and the parent's requeue, released
    together: whichever commits first, the parent counts the child closed,
    so waiting for it resumes at once, exactly once."""
    parent, _children = _dead_parent(1)
    (child,) = leases.claim("c", [ASYNC], limit=1)
    finish = _finish_one_way(iteration)
    ended, requeued = _together(
        lambda: finish(child), lambda: runqueue.leases.requeue(parent, actor="op")
    )
    assert ended and requeued.status == "queued"
    assert Run.objects.get(id=parent).children_open == 0
    run = _replay_and_wait(parent, 1)
    assert (run.status, run.children_open, _resumes(parent)) == ("queued", 0, 1)


@pytest.mark.parametrize("iteration", range(12))
def test_a_child_requeued_while_its_parent_is_requeued_is_counted_open(iteration: int) -> None:
    """Both dead-lettered, both requeued at once by operators: the child is
    open in its parent whichever commits first, and its end resumes the
    waiting parent once."""
    parent, (child_id,) = _dead_parent(1)
    (child,) = leases.claim("c", [ASYNC], limit=1)
    assert testing.fail(child, _failure())
    _together(
        lambda: runqueue.leases.requeue(child_id, actor="op"),
        lambda: runqueue.leases.requeue(parent, actor="op"),
    )
    assert Run.objects.get(id=parent).children_open == 1
    run = _replay_and_wait(parent, 1)
    assert (run.status, run.wait_reason) == ("waiting", "children")
    (again,) = leases.claim("c", [ASYNC], limit=1)
    assert testing.succeed(again, {"ok": True})
    resumed = Run.objects.get(id=parent)
    assert (resumed.status, resumed.children_open, _resumes(parent)) == ("queued", 0, 1)


def test_a_requeue_waits_for_a_childs_uncommitted_finish() -> None:
    """The child's finish has run (its parent then failed) and not committed
    when the operator requeues the parent: the requeue waits for it, and
    counts the child closed. Counting it open would leave the parent waiting
    for ever: that finish's join skipped a parent it found dead."""
    parent, _children = _dead_parent(1)
    (child,) = leases.claim("c", [ASYNC], limit=1)
    finished, commit = threading.Event(), threading.Event()

    def finish_held_open() -> None:
        params = finish_params(child, Succeeded.of({"ok": 1}))
        params |= {"run_id": child.run_id, "epoch": child.epoch, "token": child.token}
        with transaction.atomic(durable=True):
            with connection.cursor() as cursor:
                execute(cursor, "fence_finish", params | {"idle_timeout": None})
                assert cursor.fetchone() is not None
            finished.set()
            assert commit.wait(30)

    holder = Worker(finish_held_open, name="child-finish")
    holder.start()
    assert finished.wait(30)
    requeue = Worker(lambda: runqueue.leases.requeue(parent, actor="op"), name="requeue")
    requeue.start()
    assert requeue.started_fn.wait(30)
    # Blocked behind the child's transaction, which holds the parent's row
    # (or, wrongly, done without it).
    wait_until(
        lambda: not requeue.is_alive() or is_blocked(requeue.backend_pid),
        what="the requeue to wait for the child's finish",
    )
    commit.set()
    holder.outcome()
    assert requeue.outcome().status == "queued"
    assert Run.objects.get(id=parent).children_open == 0
    run = _replay_and_wait(parent, 1)
    assert (run.status, _resumes(parent)) == ("queued", 1)


def test_a_childs_finish_waits_for_an_uncommitted_requeue_and_counts_after_it() -> None:
    """The other order, forced: the requeue's statements have run (the
    parent moved back to the live partition, its count read with the child
    open) and not committed when the child finishes. The child's join waits
    for the parent's row, finds it moved (40001, nothing written), and its
    finish runs again: it counts in the requeued parent."""
    parent, _children = _dead_parent(1)
    (child,) = leases.claim("c", [ASYNC], limit=1)
    requeued, commit = threading.Event(), threading.Event()

    def requeue_held_open() -> None:
        with transaction.atomic(durable=True):
            with connection.cursor() as cursor:
                row = execute(cursor, "operator_requeue", {"run_id": parent}).fetchone()
                params = {"run_id": parent, "parent_id": row[3], "channel": "runqueue"}
                execute(cursor, "requeue_recount", params)
            assert Run.objects.get(id=parent).children_open == 1  # the child is open
            requeued.set()
            assert commit.wait(30)

    holder = Worker(requeue_held_open, name="requeue")
    holder.start()
    assert requeued.wait(30)
    finish = Worker(lambda: testing.succeed(child, {"ok": 1}), name="child-finish")
    finish.start()
    assert finish.started_fn.wait(30)
    wait_until(
        lambda: not finish.is_alive() or is_blocked(finish.backend_pid),
        what="the child's finish to wait for the requeue",
    )
    commit.set()
    holder.outcome()
    assert finish.outcome() is True
    assert Run.objects.get(id=parent).children_open == 0
    run = _replay_and_wait(parent, 1)
    assert (run.status, _resumes(parent)) == ("queued", 1)
