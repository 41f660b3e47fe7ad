"""One drain, several variants of the database or the worker, alternated in
the same minutes: runs/s, server and worker CPU and WAL per run.

    python -m tools.bench.drain_variants [--runs N] [--rounds R] [--burst]
        [--slots "async=8"] LABEL=SQL ...

Each variant gets a fresh migrated database; its SQL (may be empty) runs
after the migration, e.g. ``generic="DO $$ BEGIN EXECUTE format('ALTER
DATABASE %I SET plan_cache_mode = force_generic_plan', current_database());
END $$"``. ``--slots`` is the runworker options of one process (``;``
between processes), e.g. ``"async=8 --claim-lanes=1"``. Without ``--burst``
the workers start idle (LISTENing, their statements prepared on an empty
queue) and the runs are loaded and NOTIFYed into them, as in ``python -m
tools.bench``; with it they start on the loaded queue and exit when it is
empty. The load is ``ANALYZE``d (the runs table only, as a deployment's
autovacuum would leave a table nobody writes unanalyzed). The figures start
after the load and a CHECKPOINT; the server's CPU is cluster-wide (nothing
else may run), the worker's is its processes' (start-up excluded without
``--burst``, included with it: the wall time then includes it too)."""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
import uuid

import psycopg

from tools.bench import common, measure
from tools.bench.rq_db import WAKE
from tools.bench.rq_drain import DONE
from tools.bench.wal_breakdown import LOAD

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _drain(label: str, sql: str, runs: int, slots: str, burst: bool) -> str:
    db = f"bench_variant_{uuid.uuid4().hex[:8]}"
    url = common.url_for(db)
    env = dict(
        os.environ,
        DATABASE_URL=url,
        RUNQUEUE_HANDLER_MODULES="tools.bench.handlers",
        RUNQUEUE_LOG_LEVEL="WARNING",
    )
    command = [sys.executable, "-m", "tools.bench.worker"]
    processes = [
        [a for x in shlex.split(spec) for a in ((x,) if x.startswith("--") else ("--slots", x))]
        for spec in slots.split(";")
    ]
    with psycopg.connect(common.SERVER_URL, autocommit=True) as server:
        server.execute(f'CREATE DATABASE "{db}"')
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run(
            [sys.executable, "-m", "tools.bench.manage", "migrate", "-v0"],
            cwd=REPO,
            env=env,
            check=True,
        )
        stats = measure.Stats(db)
        with psycopg.connect(url, autocommit=True) as conn:
            if sql.strip():
                conn.execute(sql)
            if not burst:
                procs = [subprocess.Popen(command + args, cwd=REPO, env=env) for args in processes]
                while conn.execute("SELECT count(*) FROM runqueue_worker").fetchone()[0] < len(
                    procs
                ):
                    time.sleep(0.05)
                time.sleep(2.0)  # idle: first claims made on the empty queue
            with conn.transaction():
                conn.execute(LOAD, [runs, runs])
                conn.execute("ANALYZE runqueue_run")
            stats.checkpoint()
            lsn, server0 = stats.wal_lsn(), stats.server_cpu_seconds() or 0.0
            worker0 = sum(measure.process_cpu_seconds(p.pid) for p in procs)
            children0 = _children_cpu()
            started = time.perf_counter()
            if burst:
                procs = [
                    subprocess.Popen(command + ["--burst", *args], cwd=REPO, env=env)
                    for args in processes
                ]
                while any(p.poll() is None for p in procs):
                    time.sleep(0.01)
                worker0, worker1 = children0, _children_cpu()
            else:
                conn.execute(WAKE)
                while not conn.execute(DONE).fetchone()[0]:
                    time.sleep(0.05)
                worker1 = sum(measure.process_cpu_seconds(p.pid) for p in procs)
            seconds = time.perf_counter() - started
            server1 = stats.server_cpu_seconds() or 0.0
            wal = stats.wal_since(lsn)
            done = conn.execute(
                "SELECT count(*) FROM runqueue_run WHERE status = 'succeeded'"
            ).fetchone()[0]
        stats.close()
        worker = f"worker {1e6 * (worker1 - worker0) / done:5.0f} µs/run"
        return (
            f"{label:14} {done:6} runs {done / seconds:7.0f}/s  server"
            f" {1e6 * (server1 - server0) / done:5.0f} µs/run  {worker}"
            f"  WAL {wal / done:5.0f} B/run"
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait()
        with psycopg.connect(common.SERVER_URL, autocommit=True) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--slots", default="async=8")
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("variants", nargs="+", metavar="LABEL=SQL")
    args = parser.parse_args(argv)
    variants = [v.partition("=")[::2] for v in args.variants]
    print(f"{args.runs:,} no-op runs, runworker {args.slots}{' --burst' if args.burst else ''}")
    for _ in range(args.rounds):
        for label, sql in variants:
            print(_drain(label, sql, args.runs, args.slots, args.burst), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
