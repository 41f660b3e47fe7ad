"""The reference: what PostgreSQL allows with plain psycopg and no queue
library. A minimal job table, a SKIP LOCKED claim, a finish UPDATE; a
multi-row INSERT to enqueue."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import Notify
from psycopg.types.json import Jsonb

from tools.bench import measure
from tools.bench.common import Profile, idle_gap, percentiles

DDL = """
CREATE TABLE raw_job (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'queued',
    priority smallint NOT NULL DEFAULT 10,
    payload jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX raw_job_claim ON raw_job (priority, created_at) WHERE status = 'queued';
"""
CLAIM = """
UPDATE raw_job SET status = 'running'
 WHERE id = ANY(ARRAY(SELECT id FROM raw_job WHERE status = 'queued'
                       ORDER BY priority, created_at LIMIT %s FOR NO KEY UPDATE SKIP LOCKED))
RETURNING id
"""
FINISH_ONE = "UPDATE raw_job SET status = 'done' WHERE id = %s"
FINISH_MANY = "UPDATE raw_job SET status = 'done' WHERE id = ANY(%s)"
CPU_SOURCE = "thread CPU (time.thread_time) of the worker threads, summed"


def _load(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE raw_job")
        conn.execute(
            "INSERT INTO raw_job (created_at) SELECT now() + make_interval(secs => g / 1e6)"
            " FROM generate_series(1, %s) g",
            [n],
        )
        conn.execute("VACUUM ANALYZE raw_job")


class _Worker(threading.Thread):
    """One connection: claim ``batch``, finish each (or all at once), until empty."""

    def __init__(
        self, url: str, batch: int, finish_batched: bool, connected: threading.Barrier
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.batch, self.finish_batched = url, batch, finish_batched
        self.connected = connected
        self.go = threading.Event()
        self.done = 0
        self.cpu = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                self.connected.wait(30)
                self.go.wait(30)
                cpu = time.thread_time()
                while ids := [row[0] for row in conn.execute(CLAIM, [self.batch], prepare=True)]:
                    if self.finish_batched:
                        conn.execute(FINISH_MANY, [ids], prepare=True)
                    else:
                        for job_id in ids:
                            conn.execute(FINISH_ONE, [job_id], prepare=True)
                    self.done += len(ids)
                self.cpu = time.thread_time() - cpu
        except BaseException as exc:  # noqa: BLE001 - reported by drain()
            self.error = exc
            self.connected.abort()


def drain(
    url: str,
    window: measure.CommitWindow,
    n: int,
    connections: int,
    batch: int,
    finish_batched: bool,
) -> dict[str, Any]:
    """``connections`` threads, each connected before the count starts."""
    _load(url, n)
    window.stats.wait_gone()
    connected = threading.Barrier(connections + 1)
    workers = [_Worker(url, batch, finish_batched, connected) for _ in range(connections)]
    for worker in workers:
        worker.start()
    try:
        connected.wait(30)
    except threading.BrokenBarrierError:
        pass  # a worker could not connect: its error is raised below
    window.start()
    started = time.perf_counter()
    for worker in workers:
        worker.go.set()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    commits = window.stop()
    for worker in workers:
        if worker.error is not None:
            raise worker.error
    return measure.figures(
        sum(w.done for w in workers),
        seconds,
        commits=commits,
        cpu_seconds=sum(w.cpu for w in workers),
        cpu_source=CPU_SOURCE,
        wal_bytes=window.wal_bytes,
        server_cpu_seconds=window.server_cpu_seconds,
    )


def enqueue(url: str, window: measure.CommitWindow, n: int, batch: int) -> dict[str, Any]:
    """Multi-row ``INSERT ... VALUES`` of ``batch`` rows a statement, autocommit."""
    payloads = [Jsonb({"n": i}) for i in range(n)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE raw_job")
    window.stats.wait_gone()
    window.start()
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        for start in range(0, n, batch):
            chunk = payloads[start : start + batch]
            values = ", ".join(["(%s)"] * len(chunk))
            conn.execute(f"INSERT INTO raw_job (payload) VALUES {values}", chunk)
        seconds = time.perf_counter() - started
    commits = window.stop()
    return measure.enqueue(n, seconds, commits, batch, window)


def _listening(
    url: str, channel: str, on_wake: Callable[[psycopg.Connection, list[Notify]], None]
) -> Callable[[], None]:
    """A thread LISTENing on ``channel`` that calls ``on_wake(conn, notes)``
    for each NOTIFY it gets, outside psycopg's generator (which holds the
    connection), so ``on_wake`` may use it. Returns once LISTEN is in
    place; the function returned stops the thread."""
    ready, stop = threading.Event(), threading.Event()

    def listen() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"LISTEN {channel}")
            ready.set()
            while not stop.is_set():
                notes = list(conn.notifies(timeout=0.5, stop_after=1))
                if notes:
                    on_wake(conn, notes)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(10)

    def stopped() -> None:
        stop.set()
        thread.join(5)

    return stopped


def notify_latency(url: str, samples: int) -> dict[str, Any]:
    """LISTEN/NOTIFY alone: commit of a NOTIFY to its arrival at a listener."""
    arrived: dict[int, float] = {}
    got = threading.Event()

    def heard(_conn: psycopg.Connection, notes: list[Notify]) -> None:
        for note in notes:
            arrived[int(note.payload)] = time.perf_counter()
        got.set()

    stop = _listening(url, "bench_raw", heard)
    latencies = []
    with psycopg.connect(url, autocommit=True) as conn:
        for seq in range(samples):
            idle_gap()
            got.clear()
            conn.execute("SELECT pg_notify('bench_raw', %s)", [str(seq)])
            committed = time.perf_counter()
            got.wait(5)
            latencies.append((arrived[seq] - committed) * 1000)
    stop()
    return percentiles(latencies)


def claim_pickup_latency(url: str, samples: int) -> dict[str, Any]:
    """LISTEN and claim: an idle worker of one slot woken by the NOTIFY its
    job's insert committed with, claiming it with the reference claim (its
    own commit); ms from the submitter's commit to the claim's return. The
    least a PostgreSQL queue's pickup can cost here (issue 24's p50 target)."""
    claimed: dict[int, float] = {}
    got = threading.Event()

    def claim(conn: psycopg.Connection, _notes: list[Notify]) -> None:
        rows = conn.execute(CLAIM, [1], prepare=True).fetchall()
        if rows:
            claimed[rows[0][0]] = time.perf_counter()
            got.set()

    stop = _listening(url, "bench_raw_claim", claim)
    latencies = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE raw_job")
        for _ in range(samples):
            idle_gap()
            got.clear()
            with conn.transaction():
                job = conn.execute(
                    "INSERT INTO raw_job (priority) VALUES (0) RETURNING id"
                ).fetchone()[0]
                conn.execute("SELECT pg_notify('bench_raw_claim', '')")
            committed = time.perf_counter()
            if got.wait(5) and job in claimed:
                latencies.append((claimed[job] - committed) * 1000)
    stop()
    return percentiles(latencies)


def drains(slots: int) -> list[tuple[str, int, int, bool]]:
    """(name, connections, claim batch, finish batched) of the reference drains."""
    return [
        ("claim1_1conn", 1, 1, False),
        (f"claim1_{slots}conn", slots, 1, False),
        (f"claim10_{slots}conn", slots, 10, False),
        (f"claim10_finish10_{slots}conn", slots, 10, True),
    ]


def run_all(url: str, profile: Profile, log) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(DDL)
    out: dict[str, Any] = {}
    window = measure.CommitWindow(url)
    try:
        window.calibrate()
        for name, conns, batch, batched in drains(profile.slots):
            log(f"raw psycopg: {name}")
            out[name] = drain(url, window, profile.drain_runs, conns, batch, batched)
        log("raw psycopg: multi-row INSERT")
        out["enqueue"] = enqueue(url, window, profile.bulk_runs, profile.bulk_batch)
    finally:
        window.close()
    log("raw psycopg: LISTEN/NOTIFY latency")
    out["notify_latency"] = notify_latency(url, profile.latency_samples)
    log("raw psycopg: LISTEN and claim (pickup reference)")
    out["claim_pickup"] = claim_pickup_latency(url, profile.latency_samples)
    return out
