"""From a standby's promotion to the first claim on it (issue 20, item 6).

A primary and an asynchronous streaming standby of the machine's PostgreSQL
15 (``tools.topology.clusters.Pair``, free ports, a temporary folder, dropped at the
end), ``PROCESSES`` runworker processes on the libpq multi-host URL
(``target_session_attrs=read-write``), submits flowing from a thread (one
run every 50 ms, reconnecting when the primary goes). Each failover: a
backlog of short runs is queued and replicated (so there is work on the new
primary whatever the submitter is doing), the primary is crashed (``pg_ctl
-m immediate``) and the standby promoted; the figure is the new primary's
``now()`` at promotion to the first ``run.claimed`` event it records. Then a
new standby is made on the dead node's port for the next round. Target: work
resumes within 2 s of the new primary accepting connections.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg

from tools.bench import rq_db, rq_drain
from tools.topology import clusters

PROCESSES, SLOTS = 2, 4
TARGET_SECONDS = 2.0
#: Short runs queued before each failover: about 2.5 s of the workers' work.
BACKLOG, BUSY_SECONDS = 400, 0.05
DATABASE = "bench_promotion"
FIRST_CLAIM = (
    "SELECT min(created_at) FROM runqueue_event_log WHERE type = 'run.claimed' AND created_at > %s"
)


class Submitter(threading.Thread):
    """Queues one short run every 50 ms through the multi-host URL, and
    reconnects (every 0.1 s) while there is no primary."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop_event = threading.Event()
        self.acknowledged = self.errors = 0

    def run(self) -> None:
        conn: psycopg.Connection | None = None
        statement = rq_db.load(1, kind="bench.busy", payload=json.dumps({"sleep": BUSY_SECONDS}))
        while not self.stop_event.wait(0.05):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                with conn.transaction():
                    conn.execute(*statement)
                    conn.execute(rq_db.WAKE)
                self.acknowledged += 1
            except psycopg.Error:
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                self.stop_event.wait(0.1)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def run(failovers: int, log) -> dict[str, Any]:
    """``failovers`` promotions under load; seconds from each to the first claim."""
    if not clusters.available():
        raise RuntimeError("PostgreSQL 15 server binaries are not installed")
    pair = clusters.Pair()
    resumed: list[float] = []
    try:
        log("runqueue: promotion, making a primary and a standby")
        pair.create()
        pair.sql(pair.primary, f'CREATE DATABASE "{DATABASE}"')
        url = pair.url(DATABASE)
        subprocess.run(
            [sys.executable, "-m", "tools.bench.manage", "migrate", "--verbosity", "0"],
            cwd=rq_drain.REPO,
            env=rq_drain.Workers.environment(url),
            check=True,
        )
        workers = rq_drain.Workers(url, PROCESSES, SLOTS, label="promotion")
        submitter = Submitter(url)
        try:
            _wait_registered(pair, workers)
            submitter.start()
            backlog = rq_db.load(
                BACKLOG, kind="bench.busy", payload=json.dumps({"sleep": BUSY_SECONDS})
            )
            for number in range(failovers):
                with psycopg.connect(url, autocommit=True) as conn:
                    with conn.transaction():
                        conn.execute(*backlog)
                        conn.execute(rq_db.WAKE)
                pair.wait_replayed()
                log(f"runqueue: promotion {number + 1} of {failovers}")
                promoted_at = pair.failover()
                resumed.append(_first_claim(pair, promoted_at, workers))
                pair.rebuild_standby()
            workers.check_alive()  # raises if one exited: none was restarted
            alive = sum(proc.poll() is None for proc in workers.procs)
        finally:
            submitter.stop()
            workers.stop()
        with psycopg.connect(url, autocommit=True) as conn:
            finished = dict(
                conn.execute("SELECT status, count(*) FROM runqueue_run GROUP BY status")
            )
    finally:
        pair.drop()
    return {
        "failovers": failovers,
        "replication": "asynchronous",
        "processes": PROCESSES,
        "slots_per_process": SLOTS,
        "resumed_after_seconds": [round(s, 3) for s in resumed],
        "p50_seconds": round(statistics.median(resumed), 3) if resumed else None,
        "max_seconds": round(max(resumed), 3) if resumed else None,
        "target_seconds": TARGET_SECONDS,
        "target_met": bool(resumed) and max(resumed) <= TARGET_SECONDS,
        "submits_acknowledged": submitter.acknowledged,
        "submit_errors": submitter.errors,
        "statuses_at_end": finished,
        "workers_alive_at_end": alive,
    }


def _wait_registered(pair: clusters.Pair, workers: rq_drain.Workers) -> None:
    deadline = time.monotonic() + 120
    while _registered(pair) < PROCESSES:
        workers.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError("the promotion's runworker processes did not start")
        time.sleep(0.05)


def _registered(pair: clusters.Pair) -> int:
    with psycopg.connect(pair.url(DATABASE), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM runqueue_worker WHERE stopped_at IS NULL"
        ).fetchone()[0]


def _first_claim(pair: clusters.Pair, promoted_at: Any, workers: rq_drain.Workers) -> float:
    """Seconds from ``promoted_at`` to the first claim the new primary
    recorded (polled every 20 ms, up to 60 s; a worker that died fails it)."""
    deadline = time.monotonic() + 60
    with psycopg.connect(
        f"host=127.0.0.1 port={pair.primary.port} user=postgres dbname={DATABASE}",
        autocommit=True,
    ) as conn:
        while time.monotonic() < deadline:
            first = conn.execute(FIRST_CLAIM, [promoted_at]).fetchone()[0]
            if first is not None:
                return (first - promoted_at).total_seconds()
            workers.check_alive()
            time.sleep(0.02)
    raise RuntimeError("no claim on the promoted primary within 60 s")
