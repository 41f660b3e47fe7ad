"""runqueue's enqueue rates through its public API: ``runqueue.submit()`` one
run at a time, and ``runqueue.submit_many()`` in calls of ``batch`` runs.
Fresh runs, no idempotency key, no session; no worker is running. Inputs are
built before the clock starts (as for the peers); commits are counted over
the whole window, connection included."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tools.bench import measure, rq_db

ASYNC = 10


def _timed(
    window: measure.CommitWindow, n: int, per_call: int, write: Callable[[], None]
) -> dict[str, Any]:
    from django.db import connections

    rq_db.reset()
    connections.close_all()
    window.stats.wait_gone()
    window.start()
    started = time.perf_counter()
    write()
    seconds = time.perf_counter() - started
    connections.close_all()
    commits = window.stop()
    written = rq_db.count("queued", kind="bench.noop")
    if written != n:
        raise RuntimeError(f"queued {written} runs, expected {n}")
    return measure.enqueue(n, seconds, commits, per_call, window)


def submit_one_by_one(window: measure.CommitWindow, n: int) -> dict[str, Any]:
    import runqueue

    def write() -> None:
        for i in range(n):
            runqueue.submit(kind="bench.noop", payload={"n": i}, priority=ASYNC)

    return _timed(window, n, 1, write)


def submit_many(window: measure.CommitWindow, n: int, batch: int) -> dict[str, Any]:
    """``runqueue.submit_many`` if this checkout has it, else NOT RUN."""
    import runqueue

    if not hasattr(runqueue, "submit_many"):
        return {"not_run": "runqueue.submit_many is not in this checkout"}
    chunks = [
        [
            runqueue.SubmitRequest(kind="bench.noop", payload={"n": i}, priority=ASYNC)
            for i in range(start, min(start + batch, n))
        ]
        for start in range(0, n, batch)
    ]

    def write() -> None:
        for chunk in chunks:
            runqueue.submit_many(chunk)

    return _timed(window, n, batch, write)
