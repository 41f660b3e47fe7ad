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
from psycopg.conninfo import conninfo_to_dict

#: The server every system runs on (the machine's PostgreSQL 15 by default).
SERVER_URL = os.environ.get("BENCH_SERVER_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
RUN_TAG = uuid.uuid4().hex[:6]
#: The folder the budget soak's handlers record their calls and pauses in
#: (``tools.bench.budget_soak``, ``tools.bench.handlers.budget_call``).
BUDGET_LOG_ENV = "BENCH_BUDGET_LOG"


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """How big each benchmark is: ``full`` takes about ten minutes on a 2-core
    machine, ``quick`` (CI) under one, with the same figures."""

    name: str
    #: No-op runs per drain, for every system and shape.
    drain_runs: int
    #: Slots of the multi-slot drains: in one process, and split over ``processes``.
    slots: int
    processes: int
    #: One-client INSERT + COMMIT loop: the server's commit cost.
    commit_samples: int
    #: ``submit()`` one by one, and the bulk enqueue of every system.
    submit_runs: int
    bulk_runs: int
    bulk_batch: int
    latency_samples: int
    backlog: int
    claim_sizes: tuple[int, ...]
    claim_samples: int
    churn_runs: int
    #: Leases held while heartbeats alone are measured (HOT ratio).
    heartbeat_runs: int
    #: ``ctx.stream``: turns, and deltas each turn streams (tools.bench.streaming).
    stream_turns: int = 100
    stream_deltas: int = 2_000
    #: Runs parked waiting (children, signal, timer, user) beside an idle pool.
    waiting_runs: int = 10_000
    #: Timers due over a spread, for the deadline service's lateness.
    timers: int = 10_000
    timer_spread_seconds: float = 60.0
    #: The budget soak (``tools.bench.budget_soak``): seconds, and its budget's window.
    budget_seconds: float
    budget_window: int
    #: Through PgBouncer against direct (``tools.bench.pooler``): rounds of the
    #: three drains, each round in the other's reverse order.
    pooler_rounds: int = 2
    #: Promotions of a standby under load (``tools.bench.promotion``).
    failovers: int = 5


FULL = Profile(
    name="full",
    drain_runs=15_000,
    slots=8,
    processes=2,
    commit_samples=2_000,
    submit_runs=3_000,
    bulk_runs=20_000,
    bulk_batch=1_000,
    latency_samples=300,
    backlog=100_000,
    claim_sizes=(1_000, 100_000, 1_000_000),
    claim_samples=300,
    churn_runs=30_000,
    heartbeat_runs=1_000,
    budget_seconds=600,
    budget_window=60,
)
QUICK = Profile(
    name="quick",
    drain_runs=600,
    slots=8,
    processes=2,
    commit_samples=200,
    submit_runs=200,
    bulk_runs=2_000,
    bulk_batch=500,
    latency_samples=40,
    backlog=10_000,
    claim_sizes=(1_000, 10_000),
    claim_samples=100,
    churn_runs=2_000,
    heartbeat_runs=200,
    stream_turns=10,
    stream_deltas=500,
    waiting_runs=1_000,
    timers=500,
    timer_spread_seconds=4.0,
    budget_seconds=12,
    budget_window=5,
    pooler_rounds=1,
    failovers=2,
)


def url_for(dbname: str) -> str:
    """The server's URL for another database (its query string kept: a
    socket folder's ``host=``)."""
    base, sep, query = SERVER_URL.partition("?")
    head, _, _ = base.rpartition("/")
    return f"{head}/{dbname}{sep}{query}"


@contextmanager
def scratch_database(label: str, template: str | None = None) -> Iterator[str]:
    """Create a database for one system (a copy of ``template``'s URL's database,
    which nobody may be connected to) and drop it afterwards; yields its URL."""
    name = f"bench_{label}_{RUN_TAG}"
    copy = f' TEMPLATE "{conninfo_to_dict(template)["dbname"]}"' if template else ""
    with psycopg.connect(SERVER_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
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
    """An in-process worker's drain: first handler start to last handler
    finish across threads, and the process's CPU over the same span."""

    CPU_SOURCE = "process CPU (time.process_time) from the first handler start to the last finish"

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.cpu_first = self.cpu_last = 0.0
        self.count = 0
        self.closed: float | None = None

    def start(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.cpu_first = time.process_time()

    def finish(self) -> None:
        self.last = time.perf_counter()
        self.cpu_last = time.process_time()
        self.count += 1

    def close(self) -> None:
        """The worker returned: its last completion is written too."""
        self.closed = time.perf_counter()

    def seconds(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first

    def cpu_seconds(self) -> float:
        return self.cpu_last - self.cpu_first

    def to_return(self) -> dict[str, float]:
        """Runs/s up to the worker's return: counts completions a peer buffers
        after the handler, and its shutdown."""
        if self.first is None or self.closed is None:
            return {}
        return {"runs_per_s_to_return": round(self.count / (self.closed - self.first), 1)}
