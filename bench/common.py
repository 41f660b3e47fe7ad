"""What every benchmark shares: the bench databases, percentiles, timing."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

#: The server every system runs on (the machine's PostgreSQL 15 by default).
SERVER_URL = os.environ.get("BENCH_SERVER_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
RUN_TAG = uuid.uuid4().hex[:6]


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """How big each benchmark is: ``full`` takes a few minutes, ``quick`` well under one."""

    name: str
    drain_runs: int
    slots: int
    processes: int
    latency_samples: int
    backlog: int
    claim_sizes: tuple[int, ...]
    claim_samples: int
    churn_runs: int


FULL = Profile(
    name="full",
    drain_runs=5000,
    slots=4,
    processes=2,
    latency_samples=300,
    backlog=100_000,
    claim_sizes=(1_000, 100_000, 1_000_000),
    claim_samples=300,
    churn_runs=30_000,
)
QUICK = Profile(
    name="quick",
    drain_runs=600,
    slots=4,
    processes=2,
    latency_samples=40,
    backlog=10_000,
    claim_sizes=(1_000, 10_000),
    claim_samples=100,
    churn_runs=2_000,
)


def url_for(dbname: str) -> str:
    base, _, _ = SERVER_URL.rpartition("/")
    return f"{base}/{dbname}"


@contextmanager
def scratch_database(label: str) -> Iterator[str]:
    """Create a database for one system and drop it afterwards; yields its URL."""
    name = f"bench_{label}_{RUN_TAG}"
    with psycopg.connect(SERVER_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url_for(name)
    finally:
        with psycopg.connect(SERVER_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50/p95/p99/max of latencies in milliseconds."""
    if not samples_ms:
        return {}
    ordered = sorted(samples_ms)

    def pick(q: float) -> float:
        return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 2)

    return {
        "n": len(ordered),
        "p50_ms": pick(0.50),
        "p95_ms": pick(0.95),
        "p99_ms": pick(0.99),
        "max_ms": round(ordered[-1], 2),
        "mean_ms": round(statistics.fmean(ordered), 2),
    }


def idle_gap() -> None:
    """Let a pool go idle between latency samples (20-40 ms)."""
    time.sleep(0.02 + (time.perf_counter_ns() % 20) / 1000)


def server_version() -> str:
    with psycopg.connect(SERVER_URL) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


class Window:
    """First handler start to last handler finish, across threads."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0

    def start(self) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now

    def finish(self) -> None:
        self.last = time.perf_counter()
        self.count += 1

    def close(self) -> None:
        """The worker returned: its last completion is written too."""
        self.closed = time.perf_counter()

    def rates(self) -> dict[str, float]:
        """Runs/s to the last handler finish (favours the peer: completions it
        buffers are not counted), and to the worker's return (counts them,
        and its shutdown)."""
        out = {"runs": self.count, "runs_per_s": round(self.rate(), 1)}
        if self.first is not None and getattr(self, "closed", None):
            out["runs_per_s_to_return"] = round(self.count / (self.closed - self.first), 1)
        return out

    def rate(self) -> float:
        if self.first is None or self.last is None or self.last <= self.first:
            return 0.0
        return self.count / (self.last - self.first)
