"""Procrastinate: async no-op task, ``run_worker_async`` with ``concurrency=W``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import Profile, Window
from bench.peers._async import database_bytes, pickup


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


async def _drain(url: str, n: int, slots: int) -> dict[str, Any]:
    window = Window()
    app, noop = _app(url, window, None)
    async with app.open_async():
        for start in range(0, n, 1000):
            await noop.batch_defer_async(*({} for _ in range(min(1000, n - start))))
        await app.run_worker_async(
            concurrency=slots, wait=False, listen_notify=False, install_signal_handlers=False
        )
        window.close()
    return window.rates()


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
    log("procrastinate: drain")
    out: dict[str, Any] = {"version": procrastinate.__version__}
    out["drain"] = asyncio.run(_drain(url, profile.drain_runs, profile.slots))
    out["bytes_per_job"] = round(database_bytes(url) / profile.drain_runs, 1)
    log("procrastinate: pickup latency")
    out["pickup"] = asyncio.run(_pickup(url, profile.latency_samples))
    return out
