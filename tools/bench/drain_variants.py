"""One drain, several variants of the database or the worker, alternated in
the same minutes: runs/s, server and worker CPU and WAL per run.

    python -m tools.bench.drain_variants [--runs N] [--rounds R] [--burst]
        [--processes P] [--slots "async=8"] LABEL=SQL ...

Each variant gets a fresh migrated database; its SQL (may be empty) runs
after the migration, e.g. ``generic="DO $$ BEGIN EXECUTE format('ALTER
DATABASE %I SET plan_cache_mode = force_generic_plan', current_database());
END $$"``. ``--slots`` is one runworker process's options (``"async=8
--claim-lanes=1"``), ``--processes`` how many run them; BENCH_RUNWORKER_ARGS
adds options as in ``python -m tools.bench``. Without ``--burst`` the
workers start idle (LISTENing, their statements prepared on an empty queue)
and the runs are loaded and NOTIFYed into them, as in ``python -m
tools.bench``; with it they start on the loaded queue and exit when it is
empty. The load is ``ANALYZE``d (the runs table only, as a deployment's
autovacuum would leave a table nobody writes unanalyzed). The figures start
after the load and a CHECKPOINT; the server's CPU is cluster-wide (nothing
else may run), the worker's is its processes' (start-up excluded without
``--burst``, included with it: the wall time then includes it too)."""

from __future__ import annotations

import argparse
import resource
import shlex
import subprocess
import sys
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tools.bench import common, measure
from tools.bench.rq_db import WAKE
from tools.bench.rq_drain import DONE, IDLE_SECONDS, REPO, Workers
from tools.bench.wal_breakdown import LOAD


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _drain(label: str, sql: str, args: argparse.Namespace) -> str:
    options = shlex.split(args.slots)
    spec = tuple(o for o in options if not o.startswith("--"))
    extra = tuple(o for o in options if o.startswith("--")) + (("--burst",) if args.burst else ())
    with common.scratch_database("variant") as url:
        env = Workers.environment(url)
        subprocess.run(
            [sys.executable, "-m", "tools.bench.manage", "migrate", "-v0"],
            cwd=REPO,
            env=env,
            check=True,
        )
        stats = measure.Stats(conninfo_to_dict(url)["dbname"])

        def start() -> Workers:
            return Workers(url, args.processes, 0, label, spec=spec, args=extra)

        workers = None if args.burst else start()
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                if sql.strip():
                    conn.execute(sql)
                if workers is not None:
                    query = "SELECT count(*) FROM runqueue_worker"
                    while conn.execute(query).fetchone()[0] < args.processes:
                        workers.check_alive()
                        time.sleep(0.05)
                    time.sleep(IDLE_SECONDS)  # idle: first claims made on the empty queue
                with conn.transaction():
                    conn.execute(LOAD, [args.runs, args.runs])
                    conn.execute("ANALYZE runqueue_run")
                stats.checkpoint()
                lsn, server0 = stats.wal_lsn(), stats.server_cpu_seconds() or 0.0
                started = time.perf_counter()
                if workers is None:
                    before = _children_cpu()
                    workers = start()
                    for proc in workers.procs:
                        proc.wait()
                    worker = _children_cpu() - before
                else:
                    before = workers.cpu_seconds()
                    conn.execute(WAKE)
                    while not conn.execute(DONE).fetchone()[0]:
                        time.sleep(0.05)
                    worker = workers.cpu_seconds() - before
                seconds = time.perf_counter() - started
                server = (stats.server_cpu_seconds() or 0.0) - server0
                wal = stats.wal_since(lsn)
                query = "SELECT count(*) FROM runqueue_run WHERE status = 'succeeded'"
                done = conn.execute(query).fetchone()[0]
        finally:
            if workers is not None:
                workers.stop()
            stats.close()
    return (
        f"{label:14} {done:6} runs {done / seconds:7.0f}/s  server {1e6 * server / done:5.0f}"
        f" µs/run  worker {1e6 * worker / done:5.0f} µs/run  WAL {wal / done:5.0f} B/run"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--slots", default="async=8")
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("variants", nargs="+", metavar="LABEL=SQL")
    args = parser.parse_args(argv)
    variants = [v.partition("=")[::2] for v in args.variants]
    shape = f"{args.processes} x runworker {args.slots}{' --burst' if args.burst else ''}"
    print(f"{args.runs:,} no-op runs, {shape}")
    for _ in range(args.rounds):
        for label, sql in variants:
            print(_drain(label, sql, args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
