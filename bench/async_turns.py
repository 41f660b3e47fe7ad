"""``python -m bench.async_turns [--quick]``: async handlers by the thousand,
and how fast a cancel reaches a running handler (issue 25).

- **cancel -> handler**: an in-process pool with one interactive slot; a run
  whose handler waits (async: ``await asyncio.sleep``, on a slot on the
  loop; sync: ``ctx.cancelled.wait()``, on a slot thread) is cancelled with
  ``runqueue.cancel`` from this thread: ms from the cancel's commit
  returning to the handler seeing it (``CancelledError`` / the event), and
  to the slot handing its outcome back (claimable again). 200 cancels each
  (quick: 40); target p99 <= 100 ms idle.
- **1,000 turns**: one ``runworker`` process (``python -m bench.worker``),
  1,000 runs (quick: 200) each awaiting a 2 s fake model call, queued at
  once into ``--slots async=1000:loop``; beside it the same turns as sync
  handlers on ``--slots async=256`` (threads: the most one spec takes).
  Time from the first claim to the last finish and from the last claim to
  the last finish (target <= 2.5 s), the worker's peak RSS and threads, the
  server connections it held, and its CPU per run.

Runs on ``BENCH_SERVER_URL`` in a database it creates and drops; prints a
table and writes JSON. Figures from a loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import common, handlers, measure, pickup, rq, rq_db

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- cancel -> handler ------------------------------------------------------------------


def cancel_latency(samples: int, shape: str, kind: str) -> dict[str, Any]:
    import runqueue

    rq_db.reset()
    pool = rq._pool([shape])
    (group,) = pool.groups
    freed: dict[int, float] = {}
    exchange = group._exchange

    def timed_exchange(box, done):  # the slot hands its outcome back: free again
        if done is not None:
            payload = done[0].run.payload
            freed[payload["seq"]] = time.perf_counter()
        return exchange(box, done)

    group._exchange = timed_exchange
    started, cancelled = threading.Event(), {}

    def on_start(payload: Any) -> None:
        started.set()

    def on_cancelled(payload: Any) -> None:
        cancelled[payload["seq"]] = time.perf_counter()

    handlers.on_start, handlers.on_cancelled = on_start, on_cancelled
    # The clock starts when the cancel commits (its NOTIFY may be delivered
    # before ``runqueue.cancel`` returns: it reads the run back after).
    from django.db import transaction

    import runqueue.leases.transitions as transitions

    committed_at: list[float] = []
    notify_cancel = transitions.notify_cancel

    def stamped(run_id: Any, epoch: int) -> None:
        notify_cancel(run_id, epoch)
        transaction.on_commit(lambda: committed_at.append(time.perf_counter()))

    transitions.notify_cancel = stamped
    to_handler, to_free = [], []
    pickup._start(pool)
    try:
        for seq in range(samples):
            common.idle_gap()
            started.clear()
            run_id = runqueue.submit(kind=kind, payload={"seq": seq}, priority=0).run.id
            if not started.wait(10):
                raise RuntimeError(f"run {seq} never started")
            runqueue.cancel(run_id, reason="bench", actor="bench")
            committed = committed_at.pop()
            deadline = time.monotonic() + 10
            while seq not in freed and time.monotonic() < deadline:
                time.sleep(0.001)
            if seq not in freed or seq not in cancelled:
                raise RuntimeError(f"run {seq}: the cancel never reached its handler")
            to_handler.append((cancelled[seq] - committed) * 1000)
            to_free.append((freed[seq] - committed) * 1000)
    finally:
        transitions.notify_cancel = notify_cancel
        handlers.on_start = handlers.on_cancelled = None
        rq._stop(pool)
    return {"to_handler": common.percentiles(to_handler), "to_free": common.percentiles(to_free)}


# --- 1,000 turns -------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


def _registered(worker_id: str) -> bool:
    with rq_db.cursor() as cur:
        cur.execute("SELECT 1 FROM runqueue_worker WHERE id = %s", [worker_id])
        return cur.fetchone() is not None


def turns(url: str, n: int, slots: str, kind: str, seconds: float) -> dict[str, Any]:
    rq_db.reset()
    with rq_db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        (before,) = cur.fetchone()
    env = dict(os.environ) | {
        "DATABASE_URL": url,
        "RUNQUEUE_LOG_LEVEL": "WARNING",
        "RUNQUEUE_HANDLER_MODULES": "bench.handlers",
    }
    worker_id = f"bench-turns-{time.monotonic_ns()}"
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.worker", "--slots", slots, "--worker-id", worker_id],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=out,
    )
    try:
        deadline = time.monotonic() + 60
        while not _registered(worker_id):
            if proc.poll() is not None or time.monotonic() > deadline:
                out.seek(0)
                raise RuntimeError(f"runworker did not start: {out.read()[-2000:]!r}")
            time.sleep(0.1)
        time.sleep(1.0)  # LISTEN up, first claims made
        cpu_before = measure.process_cpu_seconds(proc.pid)
        idle = _status(proc.pid)
        rq_db.bulk_load(n, kind=kind, payload=json.dumps({"seconds": seconds}))
        peak = {"VmRSS": 0, "Threads": 0}
        connections = 0
        deadline = time.monotonic() + 120
        while rq_db.count("succeeded", kind) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} turns not done in 120 s")
            for key, value in _status(proc.pid).items():
                peak[key] = max(peak[key], value)
            with rq_db.cursor() as cur:
                cur.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                )
                connections = max(connections, cur.fetchone()[0] - before)
            time.sleep(0.05)
        cpu = measure.process_cpu_seconds(proc.pid) - cpu_before
        with rq_db.cursor() as cur:
            cur.execute(
                "SELECT extract(epoch FROM max(finished_at) - min(started_at)),"
                " extract(epoch FROM max(finished_at) - max(started_at))"
                " FROM runqueue_run WHERE kind = %s",
                [kind],
            )
            first_to_last, after_last_claim = cur.fetchone()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
    return {
        "slots": slots,
        "runs": n,
        "model_call_s": seconds,
        "first_claim_to_last_finish_s": round(float(first_to_last), 3),
        "last_claim_to_last_finish_s": round(float(after_last_claim), 3),
        "rss_mib_idle": round(idle["VmRSS"] / 1024, 1),
        "rss_mib_peak": round(peak["VmRSS"] / 1024, 1),
        "threads_idle": idle["Threads"],
        "threads_peak": peak["Threads"],
        "server_connections_peak": connections,
        "cpu_ms_per_run": round(cpu * 1000 / n, 3),
    }


# --- the run ----------------------------------------------------------------------------------


def run_all(url: str, samples: int, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log(f"cancel -> async handler on a loop slot, {samples} cancels")
    out["cancel_async"] = cancel_latency(samples, "interactive=1:loop", "bench.cancel_async")
    log(f"cancel -> sync handler on a slot thread, {samples} cancels")
    out["cancel_sync"] = cancel_latency(samples, "interactive=1", "bench.cancel_sync")
    log(f"{n} async turns on --slots async={n}:loop")
    out["turns_async"] = turns(url, n, f"async={n}:loop", "bench.turn_async", 2.0)
    log(f"{n} sync turns on --slots async=256 (threads)")
    out["turns_sync"] = turns(url, n, "async=256", "bench.turn_sync", 2.0)
    rq_db.reset()
    return out


def table(result: dict[str, Any]) -> str:
    lines = [f"{'cancel -> handler':<34}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"]
    for name in ("cancel_async", "cancel_sync"):
        for what in ("to_handler", "to_free"):
            r = result[name][what]
            lines.append(
                f"{name + ' ' + what:<34}{r.get('p50_ms')!s:>10}{r.get('p99_ms')!s:>10}"
                f"{r.get('max_ms')!s:>10}"
            )
    lines.append("")
    keys = [
        "first_claim_to_last_finish_s",
        "last_claim_to_last_finish_s",
        "rss_mib_peak",
        "threads_peak",
        "server_connections_peak",
        "cpu_ms_per_run",
    ]
    lines.append(
        f"{'turns':<34}" + "".join(f"{k:>32}" for k in ("async (loop)", "sync (threads)"))
    )
    for key in keys:
        a, s = result["turns_async"][key], result["turns_sync"][key]
        lines.append(f"{key:<34}{a!s:>32}{s!s:>32}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.async_turns", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="40 cancels and 200 turns")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    samples, n = (40, 200) if args.quick else (200, 1000)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "postgresql": common.server_version(),
        "load_average": os.getloadavg(),
        "caveat": "shared 2-core machine, noisy: indicative only",
    }
    with common.scratch_database("turns") as url:
        rq_db.setup_django(url)
        try:
            result |= run_all(url, samples, n)
        finally:
            from django.db import connections

            connections.close_all()
    result["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out or RESULTS / ("async-turns-quick.json" if args.quick else "async-turns.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(result))
    print(f"\nJSON: {out}  ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
