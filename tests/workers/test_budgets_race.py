"""A budget is exact under racing claimers: 8 threads, each with its own
connection, claim runs of three tenants on one budget (alone and fused with
finishes), reserve further calls inside the "handler", settle each call to
a random use at most its reservation, and give some runs back to wait for
the budget. Afterwards the event log alone is replayed: in no window of the
budget's length did the calls reserved (at what they used once settled)
exceed its tokens, nor their number its requests."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

import runqueue
from runqueue import events, leases, runtime
from runqueue.capacity import budgets
from runqueue.leases.outcomes import Succeeded
from runqueue.models import Budget, Run, RunStatus
from runqueue.sql import execute
from tests.helpers import Worker, is_blocked, wait_until
from tools.chaos.verify import budget_charges, budget_overruns

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "provider:model"
TOKENS, REQUESTS, PER_SECONDS = 4000, 20, 2
RUNS = 120
THREADS = 8
DEADLINE = 90.0


def _claimer(index: int, stop: threading.Event, errors: list[BaseException]) -> None:
    rng = random.Random(index)
    try:
        while not stop.is_set():
            spec = leases.claim_spec(f"racer-{index}", leases.ALL_CLASSES, limit=rng.randint(1, 3))
            _ok, claimed = leases.finish_and_claim([], spec)
            finishes: list[tuple[leases.Lease, Any]] = []
            for lease in claimed:
                for reservation in list(lease.reservations):
                    leases.settle(lease, rng.randint(0, reservation.tokens))
                roll = rng.random()
                if roll < 0.3 and leases.reserve(lease, KEY, rng.randint(10, 300)):
                    leases.settle(lease, rng.randint(0, lease.reservations[0].tokens))
                elif roll < 0.4 and lease.run.budget_key is None:
                    ctx = runtime.build_context(lease)
                    outcome = ctx.wait_for_budget(KEY, rng.randint(10, 300))
                    leases.write(lease, outcome)
                    continue
                finishes.append((lease, Succeeded.of(None)))
            if finishes:
                nothing = leases.claim_spec("done", leases.ALL_CLASSES, limit=0)
                leases.finish_and_claim(finishes, nothing)
            elif not claimed:
                time.sleep(0.01)  # a claimer's poll, not synchronisation
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        errors.append(exc)


def test_racing_claimers_never_reserve_past_a_budget() -> None:
    Budget.objects.create(key=KEY, tokens=TOKENS, requests=REQUESTS, per_seconds=PER_SECONDS)
    rng = random.Random(7)
    runqueue.submit_many(
        [
            runqueue.SubmitRequest(
                kind="k",
                tenant=rng.choice(["t1", "t2", "t3"]),
                budget=(KEY, rng.randint(50, 400)) if i % 4 else None,
            )
            for i in range(RUNS)
        ]
    )
    assert budgets.may_apply()
    stop, errors = threading.Event(), []
    threads = [
        Worker(lambda i=i: _claimer(i, stop, errors), name=f"claimer-{i}") for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE
    try:
        while time.monotonic() < deadline and not errors:
            if Run.objects.filter(status=RunStatus.SUCCEEDED).count() == RUNS:
                break
            time.sleep(0.05)  # polling the outcome, with a deadline
    finally:
        stop.set()
        for thread in threads:
            thread.outcome(60)
    assert not errors, errors
    assert Run.objects.filter(status=RunStatus.SUCCEEDED).count() == RUNS
    overruns, worst = budget_overruns(lambda key: (TOKENS, REQUESTS, PER_SECONDS))
    assert overruns == 0, worst
    tokens, calls = worst[KEY]
    # The race was real: the budget was the bottleneck, its windows filled.
    assert calls >= REQUESTS * 0.6 or tokens >= TOKENS * 0.6, (tokens, calls)
    assert len(budget_charges()[KEY]) > RUNS * 0.75


LATE_KEY, LATE_TOKENS = "provider:late", 100


def _bucket(cursor, at: object) -> int:
    cursor.execute("SELECT runqueue_budget_bucket(1, %s)", [at])
    return cursor.fetchone()[0]


def _clock(cursor) -> object:
    cursor.execute("SELECT clock_timestamp()")
    return cursor.fetchone()[0]


def _reserve_holding_the_row(
    lease: leases.Lease, held: threading.Event, go: threading.Event, target: list[int]
) -> list:
    """Another worker's transaction: it holds the budget's row (FOR UPDATE)
    while a settle queues behind it, and once the clock is in bucket
    ``target[0]`` it reserves one call of 100 (what ``ctx.reserve`` writes:
    the reservation and its event at its instant), then commits. One call:
    five of 20 could straddle a bucket's end (a tenth of a second) on a
    loaded machine."""
    reserved = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM runqueue_budget WHERE key = %s FOR UPDATE", [LATE_KEY])
        held.set()
        assert go.wait(DEADLINE)
        deadline = time.monotonic() + DEADLINE
        while _bucket(cursor, _clock(cursor)) < target[0]:
            assert time.monotonic() < deadline, "the clock never reached the bucket"
            time.sleep(0.005)  # polling the database clock, with a deadline
        params = {
            "key": LATE_KEY,
            "tenant": lease.run.tenant,
            "tokens": LATE_TOKENS,
            "run_id": lease.run_id,
        }
        verdict, at = execute(cursor, "budget_reserve", params).fetchone()
        assert verdict == "taken"
        events.append(
            lease.run_id,
            events.BUDGET_RESERVED,
            lease.epoch,
            {"key": LATE_KEY, "tokens": LATE_TOKENS},
            at=at,
        )
        reserved.append(_bucket(cursor, at))
    return reserved


def test_a_settle_that_waited_over_a_window_for_the_row_erases_no_newer_bucket() -> None:
    """A budget of 100 tokens a second. A call reserved 30 and used 60; its
    settle waits for the budget's row behind another transaction for more
    than 1.1 windows, while that one reserves 100 tokens in the bucket
    that now occupies the ring slot of the settle's own start. The settle
    must charge its 30 extra without resetting those 100: then no further
    call fits, and the event log's replay finds no window above the budget
    plus one reservation (before: the settle reset the slot, five more
    calls of 20 were reserved, 200 tokens in one window)."""
    Budget.objects.create(key=LATE_KEY, tokens=LATE_TOKENS, requests=None, per_seconds=1)
    for _ in range(3):
        runqueue.submit(kind="k")
    settling, holder, late = leases.claim("w", limit=3)
    assert leases.reserve(settling, LATE_KEY, 30)
    held, go, target = threading.Event(), threading.Event(), [0]
    other = Worker(lambda: _reserve_holding_the_row(holder, held, go, target), name="holder")
    other.start()
    assert held.wait(DEADLINE)
    settle = Worker(lambda: leases.settle(settling, 60), name="settle")
    settle.start()
    assert settle.started_fn.wait(DEADLINE)
    wait_until(lambda: is_blocked(settle.backend_pid), what="the settle to wait for the row")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_start FROM pg_stat_activity WHERE pid = %s", [settle.backend_pid]
        )
        started = _bucket(cursor, cursor.fetchone()[0])
    # The bucket 1.1 windows later: the same slot of the ring of eleven.
    target[0] = started + 11
    go.set()
    assert other.outcome() == [started + 11]  # in that one bucket
    assert settle.outcome() == 30

    taken = [leases.reserve(late, LATE_KEY, 20) for _ in range(5)]

    assert taken == [False] * 5
    overruns, worst = budget_overruns(lambda key: (LATE_TOKENS, None, 1))
    assert worst[LATE_KEY][0] <= LATE_TOKENS + 30, worst
    assert overruns == 0, worst
