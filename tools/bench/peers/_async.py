"""Helpers the asyncio peers share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from tools.bench.common import percentiles


async def pickup(
    samples: int, send: Callable[[int], Awaitable[Any]], started: dict[int, float]
) -> dict[str, Any]:
    """Send one job at a time to an idle worker; ms from enqueue commit to handler start."""
    latencies = []
    for seq in range(samples):
        await asyncio.sleep(0.02 + (time.perf_counter_ns() % 20) / 1000)
        await send(seq)
        committed = time.perf_counter()
        end = committed + 10
        while seq not in started:
            if time.perf_counter() > end:
                raise RuntimeError(f"job {seq} not picked up within 10 s")
            await asyncio.sleep(0.0005)
        latencies.append((started[seq] - committed) * 1000)
    return percentiles(latencies)


def database_bytes(url: str) -> int:
    """Bytes of every user table (with indexes and TOAST) of a peer's database."""
    with psycopg.connect(url) as conn:
        return int(
            conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables"
            ).fetchone()[0]
        )
