"""The reference: what PostgreSQL allows with plain psycopg and no queue
library. A minimal job table, a SKIP LOCKED claim, a finish UPDATE."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from bench.common import idle_gap, percentiles

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


def _load(conn: psycopg.Connection, n: int) -> None:
    conn.execute("TRUNCATE raw_job")
    conn.execute(
        "INSERT INTO raw_job (created_at) SELECT now() + make_interval(secs => g / 1e6)"
        " FROM generate_series(1, %s) g",
        [n],
    )
    conn.execute("VACUUM ANALYZE raw_job")


def _worker(url: str, batch: int, finish_batched: bool, counts: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        done = 0
        while True:
            ids = [row[0] for row in conn.execute(CLAIM, [batch], prepare=True)]
            if not ids:
                break
            if finish_batched:
                conn.execute(FINISH_MANY, [ids], prepare=True)
            else:
                for job_id in ids:
                    conn.execute(FINISH_ONE, [job_id], prepare=True)
            done += len(ids)
        counts.append(done)


def drain(url: str, n: int, connections: int, batch: int, finish_batched: bool) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        _load(conn, n)
    counts: list[int] = []
    threads = [
        threading.Thread(target=_worker, args=(url, batch, finish_batched, counts))
        for _ in range(connections)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    return {"runs": sum(counts), "seconds": round(seconds, 3), "runs_per_s": round(n / seconds, 1)}


def notify_latency(url: str, samples: int) -> dict[str, Any]:
    """LISTEN/NOTIFY alone: commit of a NOTIFY to its arrival at a listener."""
    arrived: dict[int, float] = {}
    ready, got = threading.Event(), threading.Event()
    stop = threading.Event()

    def listen() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("LISTEN bench_raw")
            ready.set()
            while not stop.is_set():
                for note in conn.notifies(timeout=0.5):
                    arrived[int(note.payload)] = time.perf_counter()
                    got.set()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    ready.wait(10)
    latencies = []
    with psycopg.connect(url, autocommit=True) as conn:
        for seq in range(samples):
            idle_gap()
            got.clear()
            conn.execute("SELECT pg_notify('bench_raw', %s)", [str(seq)])
            committed = time.perf_counter()
            got.wait(5)
            latencies.append((arrived[seq] - committed) * 1000)
    stop.set()
    listener.join(5)
    return percentiles(latencies)


def run_all(url: str, n: int, slots: int, samples: int, log) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(DDL)
    out: dict[str, Any] = {}
    for label, conns, batch, batched in (
        ("claim1_1conn", 1, 1, False),
        (f"claim1_{slots}conn", slots, 1, False),
        ("claim10_1conn", 1, 10, False),
        (f"claim10_{slots}conn", slots, 10, False),
        (f"claim10_finish10_{slots}conn", slots, 10, True),
    ):
        log(f"raw psycopg: {label}")
        out[label] = drain(url, n, conns, batch, batched)
    log("raw psycopg: LISTEN/NOTIFY latency")
    out["notify_latency"] = notify_latency(url, samples)
    return out
