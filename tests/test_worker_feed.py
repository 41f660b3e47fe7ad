"""The worker's batched claims: a slot group claims, in one statement, for
its idle slots only, never more than that or ``max_batch``, never outside
its classes; what it claimed is held (heartbeated) until a slot takes it."""

from __future__ import annotations

import threading

import pytest

import runqueue
from runqueue import leases
from runqueue.models import PriorityClass, Run, RunEvent, RunStatus
from runqueue.worker.feed import Empty, Feed
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec

pytestmark = pytest.mark.django_db

ASYNC, INTERACTIVE = PriorityClass.ASYNC, PriorityClass.INTERACTIVE


@runqueue.handler("test.feed_noop")
def feed_noop(ctx: runqueue.RunContext) -> dict:
    return {"owner": ctx.lease.owner}


class Holder:
    def __init__(self) -> None:
        self.held: list[leases.Lease] = []

    def hold(self, lease: leases.Lease) -> None:
        self.held.append(lease)


def _feed(size: int, *, classes=(ASYNC,), max_batch: int = 10) -> tuple[Feed, Holder, list]:
    holder, limits = Holder(), []

    def claim(*args, **kwargs):
        limits.append(kwargs["limit"])
        return leases.claim(*args, **kwargs)

    feed = Feed(holder, classes, size, lease_seconds=30, max_batch=max_batch, claim=claim)
    return feed, holder, limits


def _submit(n: int, priority: int = ASYNC) -> None:
    for _ in range(n):
        runqueue.submit(kind="k", priority=priority)


def _running() -> int:
    return Run.objects.filter(status=RunStatus.RUNNING).count()


def test_one_statement_claims_for_every_idle_slot_and_no_more() -> None:
    _submit(10)
    feed, holder, limits = _feed(3)
    first = feed.take("w/async-0")
    assert isinstance(first, leases.Lease)
    assert limits == [3] and _running() == 3
    # The other two idle slots take what was claimed for them: no claim.
    assert isinstance(feed.take("w/async-1"), leases.Lease)
    assert isinstance(feed.take("w/async-2"), leases.Lease)
    assert limits == [3] and _running() == 3
    # One slot is idle again: the next claim is for that one only.
    feed.done()
    assert isinstance(feed.take("w/async-0"), leases.Lease)
    assert limits == [3, 1] and _running() == 4
    assert len(holder.held) == 4
    assert RunEvent.objects.filter(type="run.claimed").count() == 4


def test_max_batch_caps_a_large_group() -> None:
    _submit(10)
    feed, _holder, limits = _feed(20, max_batch=4)
    feed.take("w/async-0")
    assert limits == [4] and _running() == 4


def test_a_group_never_claims_outside_its_classes() -> None:
    _submit(3, INTERACTIVE)
    _submit(2, ASYNC)
    feed, holder, _limits = _feed(5)
    assert isinstance(feed.take("w/async-0"), leases.Lease)
    assert sorted(lease.run.priority for lease in holder.held) == [ASYNC, ASYNC]
    assert Run.objects.filter(priority=INTERACTIVE, status=RunStatus.QUEUED).count() == 3
    assert feed.take("w/async-1") is not Empty.NOTHING_DUE  # the second async run
    assert feed.take("w/async-2") is Empty.NOTHING_DUE


def test_claimed_runs_not_yet_taken_are_held_and_heartbeated() -> None:
    _submit(3)
    feed, holder, _limits = _feed(3)
    feed.take("w/async-0")
    waiting = feed.ready()
    assert len(waiting) == 2 and all(lease in holder.held for lease in waiting)
    assert all(leases.heartbeat(lease) for lease in waiting)


def test_a_slot_that_asks_during_a_claim_is_woken_when_it_ends() -> None:
    _submit(1)
    entered, release = threading.Event(), threading.Event()
    holder = Holder()

    def slow_claim(*args, **kwargs):
        entered.set()
        assert release.wait(10)
        return []

    feed = Feed(holder, (ASYNC,), 2, lease_seconds=30, max_batch=10, claim=slow_claim)
    wake = threading.Event()
    feed.join(wake)
    claimer = threading.Thread(target=feed.take, args=("w/async-0",))
    claimer.start()
    assert entered.wait(10)
    assert feed.take("w/async-1") is Empty.CLAIMING
    release.set()
    claimer.join(10)
    assert wake.wait(10)


def test_an_empty_claim_wakes_nobody() -> None:
    """Idle slots must not wake each other for ever with empty claims."""
    feed, _holder, _limits = _feed(2)
    mine, other = threading.Event(), threading.Event()
    feed.join(mine)
    feed.join(other)
    assert feed.take("w/async-0", mine) is Empty.NOTHING_DUE
    assert not mine.is_set() and not other.is_set()


def test_runs_claimed_for_other_slots_wake_them_but_not_the_claimer() -> None:
    _submit(2)
    feed, _holder, _limits = _feed(2)
    mine, other = threading.Event(), threading.Event()
    feed.join(mine)
    feed.join(other)
    assert isinstance(feed.take("w/async-0", mine), leases.Lease)
    assert other.is_set() and not mine.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_burst_pool_drains_every_run_exactly_once() -> None:
    runs = [
        runqueue.submit(kind="test.feed_noop", payload={"i": i}, priority=ASYNC).run.id
        for i in range(40)
    ]
    config = PoolConfig(slots=(SlotSpec.parse("async=4"),), burst=True, worker_id="feedtest")
    assert Pool(config).run() == 0
    assert Run.objects.filter(id__in=runs, status=RunStatus.SUCCEEDED).count() == 40
    for event_type in ("run.claimed", "run.succeeded"):
        per_run = RunEvent.objects.filter(run_id__in=runs, type=event_type)
        assert per_run.count() == 40
        assert per_run.values("run_id").distinct().count() == 40
