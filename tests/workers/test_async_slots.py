"""An ``async def`` handler runs on the worker's event loop whatever the
slot syntax: ``--slots async=N`` runs N async turns at once, as
``async=N:loop`` does, without a thread held per turn."""

from __future__ import annotations

import pytest

import runqueue
from runqueue.models import PriorityClass, Run, RunStatus
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ASYNC = PriorityClass.ASYNC


@pytest.mark.parametrize("slots", ["async=300", "async=300:loop"])
def test_n_async_slots_run_n_async_turns_at_once(start_worker, slots: str) -> None:
    """300 async turns that each wait until all 300 are waiting (a barrier
    on the worker's loop): they finish only if the worker runs all of them
    at once. A worker that ran fewer would leave the rest queued and the
    running ones would give up at their timeout (``met`` false)."""
    n = 300
    runs = [
        runqueue.submit(
            kind="test.async_rendezvous",
            payload={"group": slots, "n": n, "timeout": 60},
            priority=ASYNC,
        ).run.id
        for _ in range(n)
    ]
    worker = start_worker("--slots", slots, "--burst")
    assert worker.wait(120) == 0, worker.output()
    done = wait_until(
        lambda: list(Run.objects.filter(id__in=runs).values_list("status", "result")),
        what="the runs' rows",
    )
    assert [status for status, _ in done] == [RunStatus.SUCCEEDED] * n, worker.output()[-3000:]
    assert all(result == {"met": True} for _, result in done)


def test_async_runs_handed_to_the_loop_still_count_against_the_slots(start_worker) -> None:
    """Two thread slots, three async turns that each wait for all three:
    the slot threads hand their runs to the loop and are free, but the
    group starts no third run while two are running. The first two give up
    at their timeout having seen two arrive; the third then meets at once."""
    runs = [
        runqueue.submit(
            kind="test.async_rendezvous",
            payload={"group": "capped", "n": 3, "timeout": 2},
            priority=ASYNC,
        ).run.id
        for _ in range(3)
    ]
    worker = start_worker("--slots", "async=2", "--burst")
    assert worker.wait(60) == 0, worker.output()
    results = sorted(
        (Run.objects.filter(id__in=runs).values_list("result", flat=True)),
        key=lambda r: r["met"],
    )
    assert results == [
        {"met": False, "arrived": 2},
        {"met": False, "arrived": 2},
        {"met": True},
    ], worker.output()[-3000:]
