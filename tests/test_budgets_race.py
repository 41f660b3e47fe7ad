"""A budget is exact under racing claimers: 8 threads, each with its own
connection, claim runs of three tenants on one budget (alone and fused with
finishes), reserve further calls inside the "handler", settle each call to
a random use at most its reservation, and give some runs back to wait for
the budget. Afterwards the event log alone is replayed: in no window of the
budget's length did the calls reserved (at what they used once settled)
exceed its tokens, nor their number its requests."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
from django.db import connection

import runqueue
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


def _charges() -> list[tuple[float, int]]:
    """(when, tokens) of every reservation, from the event log alone: each
    claim of a run with a budget and each budget.reserved, at what the call
    used once settled (settles come in reservation order per run)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT e.run_id, e.type, extract(epoch FROM e.created_at), e.data
              FROM runqueue_run_event e
             WHERE e.type IN ('run.claimed', 'budget.reserved', 'budget.settled',
                              'run.requeued', 'run.created')
             ORDER BY e.id
            """
        )
        rows = cursor.fetchall()
    declared: dict[Any, int | None] = {}
    open_: dict[Any, list[list[Any]]] = {}
    charges: list[list[Any]] = []
    for run_id, type_, at, text in rows:
        data = json.loads(text) if isinstance(text, str) else text
        if type_ == "run.created":
            declared[run_id] = initial.get(run_id)
        elif type_ == "run.requeued" and data.get("reason") == "budget":
            declared[run_id] = data["budget"]["tokens"]
        elif type_ == "run.claimed" and declared.get(run_id) is not None:
            charge = [float(at), declared[run_id]]
            charges.append(charge)
            open_.setdefault(run_id, []).append(charge)
        elif type_ == "budget.reserved":
            charge = [float(at), data["tokens"]]
            charges.append(charge)
            open_.setdefault(run_id, []).append(charge)
        elif type_ == "budget.settled":
            charge = open_[run_id].pop(0)
            assert charge[1] == data["reserved"]
            charge[1] = data["used"]
    return [(at, tokens) for at, tokens in charges]


#: Each run's budget tokens as submitted (the log's run.created has none).
initial: dict[Any, int | None] = {}


def _worst_window(charges: list[tuple[float, int]]) -> tuple[int, int]:
    """The most tokens and calls in any window of PER_SECONDS."""
    charges.sort()
    most_tokens = most_calls = 0
    start = 0
    total = 0
    for end, (at, tokens) in enumerate(charges):
        total += tokens
        while charges[start][0] <= at - PER_SECONDS:
            total -= charges[start][1]
            start += 1
        most_tokens = max(most_tokens, total)
        most_calls = max(most_calls, end - start + 1)
    return most_tokens, most_calls


def test_racing_claimers_never_reserve_past_a_budget() -> None:
    Budget.objects.create(key=KEY, tokens=TOKENS, requests=REQUESTS, per_seconds=PER_SECONDS)
    rng = random.Random(7)
    made = runqueue.submit_many(
        [
            runqueue.SubmitRequest(
                kind="k",
                tenant=rng.choice(["t1", "t2", "t3"]),
                budget=(KEY, rng.randint(50, 400)) if i % 4 else None,
            )
            for i in range(RUNS)
        ]
    )
    initial.clear()
    initial.update({s.run.id: s.run.budget_tokens for s in made})
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
    charges = _charges()
    tokens, calls = _worst_window(charges)
    assert tokens <= TOKENS, (tokens, TOKENS)
    assert calls <= REQUESTS, (calls, REQUESTS)
    # The race was real: the budget was the bottleneck, its windows filled.
    assert calls >= REQUESTS * 0.6 or tokens >= TOKENS * 0.6, (tokens, calls)
    assert len(charges) > RUNS * 0.75
