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

import runqueue
from chaos.verify import budget_charges, budget_overruns
from runqueue import budgets, leases, runtime
from runqueue.models import Budget, Run, RunStatus
from runqueue.outcomes import Succeeded
from tests.helpers import Worker

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
