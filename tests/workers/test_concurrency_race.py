"""Caps are exact under racing claimers: 8 threads, each with its own
connection, claim and finish (alone and fused with the next claim), give
runs up, end turns waiting for the user and let leases expire, while others
sweep, deliver input and requeue dead-lettered runs. Another connection
samples the running count per (key, class) all along, and afterwards the
event log alone is replayed: no (key, class) ever had more running runs
than its cap."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from django.db import connection

import runqueue
from runqueue import leases
from runqueue.capacity import concurrency
from runqueue.errors import ActiveRunConflict, InvalidTransition
from runqueue.leases.outcomes import Failed, Succeeded
from runqueue.models import ConcurrencyLimit, PriorityClass, Run, RunStatus
from tests.helpers import Worker
from tools.chaos.verify import cap_violations

pytestmark = pytest.mark.django_db(transaction=True)

INTER, ASYNC, MAINT = PriorityClass.INTERACTIVE, PriorityClass.ASYNC, PriorityClass.MAINTENANCE
LIMITS = {("k1", INTER): 1, ("k2", INTER): 2, ("k3", ASYNC): 3, ("k1", ASYNC): 1}
#: RUNQUEUE["CONCURRENCY"]: every key without a limit runs 2 at a time in maintenance.
DEFAULTS = {"maintenance": 2}
KEYS = ("k1", "k2", "k3", "free")
RUNS = 360
THREADS = 8
DEADLINE = 90.0


def _cap(key: str, cls: PriorityClass) -> int | None:
    if (key, cls) in LIMITS:
        return LIMITS[(key, cls)]
    return 2 if cls == MAINT else None


class Sampler(threading.Thread):
    """Counts running runs per (key, class) from its own connection, as
    fast as it can, and keeps the highest count seen."""

    def __init__(self, conn: psycopg.Connection, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.conn, self.stop = conn, stop
        self.peak: Counter[tuple[str, int]] = Counter()
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            rows = self.conn.execute(
                "SELECT concurrency_key, least(priority / 10, 2), count(*) FROM runqueue_run"
                " WHERE status = 'running' GROUP BY 1, 2"
            ).fetchall()
            for key, cls, n in rows:
                pair = (key, cls)
                self.peak[pair] = max(self.peak[pair], n)
            self.samples += 1


def _claimer(index: int, stop: threading.Event, errors: list[BaseException]) -> None:
    rng = random.Random(index)
    owner = f"racer-{index}"
    held: list[leases.Lease] = []
    requeued: set[Any] = set()
    try:
        while not stop.is_set():
            # Finish some of what is held: fused with the next claim, or alone.
            # A lease of 0.3 s is held 0.5 s: the sweeper takes its run back
            # first, so its finish is fenced.
            now = time.monotonic()
            done = [
                lease
                for lease in held
                if rng.random() < 0.6 and (lease.lease_seconds > 1 or now - lease.claimed > 0.5)
            ]
            held = [lease for lease in held if lease not in done]
            finishes: list[tuple[leases.Lease, Any]] = []
            for lease in done:
                roll = rng.random()
                if roll < 0.08:
                    leases.give_up(lease, RuntimeError("flaky"))  # requeued at once
                elif roll < 0.14 and lease.run.session_id:
                    leases.wait_for_user(lease, {"go on?": True})
                elif roll < 0.18 and lease.run_id not in requeued:
                    requeued.add(lease.run_id)
                    finishes.append((lease, Failed(leases.permanent_failure(ValueError(), 1))))
                else:
                    finishes.append((lease, Succeeded.of(None)))
            limit = rng.randint(0, 3)
            seconds = 0.3 if rng.random() < 0.1 else 60  # some leases expire
            spec = leases.claim_spec(owner, leases.ALL_CLASSES, limit=limit, lease_seconds=seconds)
            if finishes or limit:
                _ok, claimed = leases.finish_and_claim(finishes, spec)
                held.extend(claimed)
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        errors.append(exc)
    finally:
        for lease in held:
            leases.release(lease, "test over")


def _housekeeper(stop: threading.Event, errors: list[BaseException]) -> None:
    """Sweeps expired leases, delivers input to waiting runs, requeues the
    dead letter: every way back to queued but the claim's own."""
    try:
        while not stop.is_set():
            leases.sweep()
            for run in Run.objects.filter(status=RunStatus.WAITING_FOR_USER)[:20]:
                try:
                    runqueue.submit(kind="k", session_id=run.session_id, payload={"yes": 1})
                except ActiveRunConflict:
                    pass
            for run_id in Run.objects.filter(status=RunStatus.FAILED).values_list("id", flat=True)[
                :20
            ]:
                try:
                    leases.requeue(run_id, actor="test")
                except (InvalidTransition, ActiveRunConflict):
                    pass
            time.sleep(0.01)  # a housekeeping pace, not synchronisation
    except BaseException as exc:  # noqa: BLE001
        errors.append(exc)


def test_racing_claimers_never_take_a_key_past_its_cap(settings, raw_connect) -> None:
    settings.RUNQUEUE = {
        "CONCURRENCY": DEFAULTS,
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
        "MAX_ATTEMPTS": 50,
    }
    for (key, cls), cap in LIMITS.items():
        ConcurrencyLimit.objects.create(key=key, priority_class=cls, max_running=cap)
    rng = random.Random(12)
    runqueue.submit_many(
        [
            runqueue.SubmitRequest(
                kind="k",
                concurrency_key=rng.choice(KEYS),
                priority=rng.choice([0, 5, 10, 20]),
                session_id=f"s{i}" if i % 4 == 0 else None,
            )
            for i in range(RUNS)
        ]
    )
    assert concurrency.caps_may_apply()
    stop, errors = threading.Event(), []
    sampler = Sampler(raw_connect(), stop)
    threads = [
        Worker(lambda i=i: _claimer(i, stop, errors), name=f"claimer-{i}") for i in range(THREADS)
    ]
    threads.append(Worker(lambda: _housekeeper(stop, errors), name="housekeeper"))
    sampler.start()
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
        sampler.join(10)
    assert not errors, errors
    assert Run.objects.filter(status=RunStatus.SUCCEEDED).count() == RUNS
    over = {
        pair: n
        for pair, n in sampler.peak.items()
        if (cap := _cap(pair[0], PriorityClass(pair[1] * 10))) is not None and n > cap
    }
    assert not over, over
    assert sampler.samples > 100
    violations, peaks = cap_violations(_cap)
    assert violations == 0, peaks
    # The race was real: capped keys reached their caps, and kept to them;
    # sweeps took runs back from their owners, whose finishes were fenced.
    assert peaks["k2/interactive"] == 2 and peaks["k3/async"] == 3, peaks
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, count(*) FROM runqueue_run_event WHERE type IN"
            " ('run.fenced', 'run.input_delivered', 'run.operator_requeued', 'run.requeued')"
            " GROUP BY type"
        )
        seen = dict(cursor.fetchall())
    assert set(seen) == {
        "run.fenced",
        "run.input_delivered",
        "run.operator_requeued",
        "run.requeued",
    }, seen
