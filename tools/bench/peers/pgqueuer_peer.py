"""PgQueuer: async no-op entrypoint, ``QueueManager.run`` in drain mode in this
process (batch 1, its default batching, and capped at 8 tasks), and its
list enqueue (``queries.enqueue([...], [...], [...])``)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from tools.bench import measure
from tools.bench.common import Profile, Window
from tools.bench.peers._async import database_bytes, pickup

#: name: QueueManager.run options.
DRAINS: dict[str, dict[str, int]] = {
    "drain": {},
    "drain_batch1": {"batch_size": 1},
    "drain_capped": {"batch_size": 4, "max_concurrent_tasks": 8},
}


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


async def _enqueue_lists(queries, payloads: list[bytes | None], batch: int) -> None:
    for start in range(0, len(payloads), batch):
        chunk = payloads[start : start + batch]
        await queries.enqueue(["noop"] * len(chunk), chunk, [0] * len(chunk))


async def _drain(
    url: str, window: measure.CommitWindow, n: int, **run_kwargs: Any
) -> dict[str, Any]:
    from pgqueuer.types import QueueExecutionMode

    conn, queries = await _connect(url)
    await _enqueue_lists(queries, [None] * n, 1000)
    await conn.close()
    window.stats.wait_gone()
    drained = Window()
    window.start()
    conn, queries = await _connect(url)
    qm = _manager(queries, drained, None)
    await qm.run(mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=1), **run_kwargs)
    drained.close()
    if not conn.is_closed():
        await conn.close()
    commits = window.stop()
    return measure.in_process(drained, commits, window) | {"options": run_kwargs}


async def _enqueue(url: str, window: measure.CommitWindow, n: int, batch: int) -> dict[str, Any]:
    payloads: list[bytes | None] = [str(i).encode() for i in range(n)]
    conn, queries = await _connect(url)
    await queries.clear_queue()
    await conn.close()
    window.stats.wait_gone()
    window.start()
    conn, queries = await _connect(url)
    started = time.perf_counter()
    await _enqueue_lists(queries, payloads, batch)
    seconds = time.perf_counter() - started
    await conn.close()
    commits = window.stop()
    conn, queries = await _connect(url)
    await queries.clear_queue()
    await conn.close()
    return measure.enqueue(n, seconds, commits, batch, window)


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
    window = measure.CommitWindow(url)
    try:
        window.calibrate()
        for name, options in DRAINS.items():
            log(f"pgqueuer: {name} {options or '(defaults)'}")
            out[name] = asyncio.run(_drain(url, window, profile.drain_runs, **options))
            if name == "drain":
                out["bytes_per_job"] = round(database_bytes(url) / profile.drain_runs, 1)
        log("pgqueuer: enqueue lists")
        out["enqueue"] = asyncio.run(_enqueue(url, window, profile.bulk_runs, profile.bulk_batch))
    finally:
        window.close()
    log("pgqueuer: pickup latency")
    out["pickup"] = asyncio.run(_pickup(url, profile.latency_samples))
    return out
