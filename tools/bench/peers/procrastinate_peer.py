"""Procrastinate: async no-op task, ``run_worker_async`` in this process with
``concurrency`` 1 and W, and its bulk enqueue ``batch_defer_async``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tools.bench import measure
from tools.bench.common import Profile, Window
from tools.bench.peers._async import database_bytes, pickup


def _app(url: str, window: Window | None, started: dict[int, float] | None):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="bench")
    async def noop(seq: int = 0) -> None:
        if window is not None:
            window.start()
            window.finish()
        if started is not None:
            started[seq] = time.perf_counter()

    return app, noop


async def _batch_defer(noop, kwargs: list[dict[str, int]], batch: int) -> None:
    for start in range(0, len(kwargs), batch):
        await noop.batch_defer_async(*kwargs[start : start + batch])


async def _drain(
    url: str, window: measure.CommitWindow, n: int, concurrency: int
) -> dict[str, Any]:
    app, noop = _app(url, None, None)
    async with app.open_async():
        await _batch_defer(noop, [{} for _ in range(n)], 1000)
    window.stats.wait_gone()
    drained = Window()
    app, _ = _app(url, drained, None)
    window.start()
    async with app.open_async():
        await app.run_worker_async(
            concurrency=concurrency,
            wait=False,
            listen_notify=False,
            install_signal_handlers=False,
        )
        drained.close()
    commits = window.stop()
    return measure.in_process(drained, commits, window) | {"concurrency": concurrency}


async def _enqueue(url: str, window: measure.CommitWindow, n: int, batch: int) -> dict[str, Any]:
    kwargs = [{"seq": i} for i in range(n)]
    window.stats.wait_gone()
    app, noop = _app(url, None, None)
    window.start()
    async with app.open_async():
        started = time.perf_counter()
        await _batch_defer(noop, kwargs, batch)
        seconds = time.perf_counter() - started
    commits = window.stop()
    return measure.enqueue(n, seconds, commits, batch, window)


async def _pickup(url: str, samples: int) -> dict[str, Any]:
    started: dict[int, float] = {}
    app, noop = _app(url, None, started)
    async with app.open_async():
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=4, listen_notify=True, install_signal_handlers=False)
        )
        await asyncio.sleep(1.0)
        try:
            return await pickup(samples, lambda seq: noop.defer_async(seq=seq), started)
        finally:
            worker.cancel()
            try:
                await asyncio.wait_for(worker, 10)
            except (asyncio.CancelledError, TimeoutError):
                pass


async def _install(url: str) -> None:
    app, _ = _app(url, None, None)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


def run_all(url: str, profile: Profile, log) -> dict[str, Any]:
    import procrastinate

    asyncio.run(_install(url))
    out: dict[str, Any] = {"version": procrastinate.__version__}
    window = measure.CommitWindow(url)
    try:
        window.calibrate()
        for name, concurrency in (("drain", profile.slots), ("drain_1", 1)):
            log(f"procrastinate: drain, concurrency {concurrency}")
            out[name] = asyncio.run(_drain(url, window, profile.drain_runs, concurrency))
            if name == "drain":
                out["bytes_per_job"] = round(database_bytes(url) / profile.drain_runs, 1)
        log("procrastinate: pickup latency")
        out["pickup"] = asyncio.run(_pickup(url, profile.latency_samples))
        # Last: the jobs it queues stay queued.
        log("procrastinate: batch_defer")
        out["enqueue"] = asyncio.run(_enqueue(url, window, profile.bulk_runs, profile.bulk_batch))
    finally:
        window.close()
    return out
