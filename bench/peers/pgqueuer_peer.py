"""PgQueuer: async no-op entrypoint, ``QueueManager.run`` in drain mode, with
its default batching and capped at 8 concurrent tasks (batch 4)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from bench.common import Profile, Window
from bench.peers._async import database_bytes, pickup


async def _connect(url: str):
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(url)
    return conn, Queries(AsyncpgDriver(conn))


def _manager(queries, window: Window | None, started: dict[int, float] | None):
    from pgqueuer import QueueManager

    qm = QueueManager(queries)

    @qm.entrypoint("noop")
    async def noop(job) -> None:
        if window is not None:
            window.start()
            window.finish()
        if started is not None:
            started[int(job.payload)] = time.perf_counter()

    return qm


async def _drain(url: str, n: int, **run_kwargs: Any) -> dict[str, Any]:
    from pgqueuer.types import QueueExecutionMode

    conn, queries = await _connect(url)
    for start in range(0, n, 1000):
        size = min(1000, n - start)
        await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
    await conn.close()
    window = Window()
    conn, queries = await _connect(url)
    qm = _manager(queries, window, None)
    await qm.run(mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=1), **run_kwargs)
    window.close()
    if not conn.is_closed():
        await conn.close()
    return window.rates() | {"options": run_kwargs}


async def _pickup(url: str, samples: int) -> dict[str, Any]:
    started: dict[int, float] = {}
    conn, queries = await _connect(url)
    qm = _manager(queries, None, started)
    worker = asyncio.create_task(qm.run(dequeue_timeout=timedelta(seconds=30)))
    await asyncio.sleep(1.0)
    sconn, squeries = await _connect(url)
    try:
        return await pickup(
            samples, lambda seq: squeries.enqueue("noop", str(seq).encode()), started
        )
    finally:
        qm.shutdown.set()
        try:
            await asyncio.wait_for(worker, 10)
        except TimeoutError:
            worker.cancel()
        await sconn.close()
        if not conn.is_closed():
            await conn.close()


async def _install(url: str) -> None:
    conn, queries = await _connect(url)
    await queries.install()
    await conn.close()


def run_all(url: str, profile: Profile, log) -> dict[str, Any]:
    import pgqueuer

    asyncio.run(_install(url))
    out: dict[str, Any] = {"version": pgqueuer.__version__}
    log("pgqueuer: drain, default batching")
    out["drain"] = asyncio.run(_drain(url, profile.drain_runs))
    out["bytes_per_job"] = round(database_bytes(url) / profile.drain_runs, 1)
    log("pgqueuer: drain, capped at 8 concurrent tasks")
    out["drain_capped"] = asyncio.run(
        _drain(url, profile.drain_runs, batch_size=4, max_concurrent_tasks=8)
    )
    log("pgqueuer: pickup latency")
    out["pickup"] = asyncio.run(_pickup(url, profile.latency_samples))
    return out
