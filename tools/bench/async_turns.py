"""``python -m tools.bench.async_turns [--quick]``: async handlers by the thousand,
and how fast a cancel reaches a running handler (issue 25).

- **cancel -> handler**: an in-process pool with one interactive slot; a run
  whose handler waits (async: ``await asyncio.sleep``, on a slot on the
  loop; sync: ``ctx.cancelled.wait()``, on a slot thread) is cancelled with
  ``runqueue.cancel`` from this thread: ms from the cancel's commit
  returning to the handler seeing it (``CancelledError`` / the event), and
  to the slot handing its outcome back (claimable again). 200 cancels each
  (quick: 40); target p99 <= 100 ms idle.
- **1,000 turns**: one ``runworker`` process (``python -m tools.bench.worker``),
  1,000 runs (quick: 200) each awaiting a 2 s fake model call, queued at
  once into ``--slots async=1000:loop``; beside it the same turns as sync
  handlers on ``--slots async=256`` (threads: the most one spec takes).
  Time from the first claim to the last finish and from the last claim to
  the last finish (target <= 2.5 s), the worker's peak RSS and threads, the
  server connections it held, its CPU per run and the database's commits
  per run.
- **peers**: the same turns on Procrastinate's and PgQueuer's async workers
  (``tools/bench/peers/turns.py``), each in one process of its own with a
  concurrency of the number of turns, measured the same way from the
  peer's own tables (Procrastinate's ``procrastinate_events``, PgQueuer's
  ``pgqueuer_log``: the server's clock, as runqueue's run rows).

Every worker is started, becomes idle (listening), is paused with SIGSTOP
for ``SETTLE_SECONDS`` (so its start-up commits are reported before the
count starts), resumed, and the turns are queued at once in one transaction
of the bench's counted connection. Commits per run are ``xact_commit`` of
the system's database from then to the worker's exit (its shutdown
included), less the bench's own polls (``measure.CommitWindow``). CPU per
run is the worker process's utime + stime over the drain.

``--parts cancel,turns,peers`` (default all); ``--turns N`` overrides the
number of turns. Runs on ``BENCH_SERVER_URL`` in databases it creates and
drops (one for runqueue, one per peer); prints a table and writes JSON. A
peer that is not installed or fails is reported as NOT RUN. Figures from a
loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tools.bench import common, handlers, measure, pickup, rq, rq_db

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
#: The fake model call each turn awaits, seconds.
MODEL_CALL_S = 2.0


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


# --- 1,000 turns ---------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


#: An idle backend reports its commits within 10 s (PostgreSQL 15's
#: PGSTAT_IDLE_INTERVAL): a worker paused this long has reported its start-up.
SETTLE_SECONDS = 10.5


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """One system's worker process and how the bench reads its progress."""

    name: str
    argv: list[str]
    env: dict[str, str]
    #: Until it returns True the worker is not ready (polled every 0.1 s).
    ready: Callable[[Path], bool]
    #: Queue ``n`` turns through the bench's counted connection (one transaction).
    enqueue: Callable[[psycopg.Connection, int], None]
    done: str
    timing: str
    shape: str


def _runqueue_spec(url: str, slots: str, kind: str, seconds: float) -> WorkerSpec:
    worker_id = f"bench-turns-{time.monotonic_ns()}"

    def ready(_: Path) -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM runqueue_worker WHERE id = %s", [worker_id])
            return row.fetchone() is not None

    def enqueue(conn: psycopg.Connection, n: int) -> None:
        conn.execute(*rq_db.load(n, kind=kind, payload=json.dumps({"seconds": seconds})))
        conn.execute(rq_db.WAKE)

    return WorkerSpec(
        name=kind,
        argv=[
            sys.executable,
            "-m",
            "tools.bench.worker",
            "--slots",
            slots,
            "--worker-id",
            worker_id,
        ],
        env=dict(os.environ)
        | {
            "DATABASE_URL": url,
            "RUNQUEUE_LOG_LEVEL": "WARNING",
            "RUNQUEUE_HANDLER_MODULES": "tools.bench.handlers",
        },
        ready=ready,
        enqueue=enqueue,
        done=f"SELECT count(*) FROM runqueue_run WHERE status = 'succeeded' AND kind = '{kind}'",
        timing=f"""
            SELECT extract(epoch FROM max(finished_at) - min(started_at)),
                   extract(epoch FROM max(finished_at) - max(started_at))
              FROM runqueue_run WHERE kind = '{kind}'
        """,
        shape=f"runworker --slots {slots}",
    )


def _peer_spec(system: str, url: str, n: int, seconds: float) -> WorkerSpec:
    from tools.bench.peers import turns as peer_turns

    peer = peer_turns.PEERS[system]

    def ready(output: Path) -> bool:
        return b"ready" in output.read_bytes()

    return WorkerSpec(
        name=system,
        argv=[sys.executable, "-m", "tools.bench.peers.turns", system, url, str(n)],
        env=dict(os.environ),
        ready=ready,
        enqueue=lambda conn, count: peer_turns.enqueue(system, conn, count, seconds),
        done=peer.done,
        timing=peer.timing,
        shape=peer.shape.format(n=n, batch=peer_turns.pgqueuer_batch(n)),
    )


def _pause(proc: subprocess.Popen, stats: measure.Stats) -> None:
    """SIGSTOP the worker outside a transaction (so nothing of its start-up is
    left unreported when the count starts), for SETTLE_SECONDS."""
    deadline = time.monotonic() + 30
    while True:
        os.kill(proc.pid, signal.SIGSTOP)
        if stats.busy() == 0:
            break
        os.kill(proc.pid, signal.SIGCONT)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.pid}: never idle between transactions")
        time.sleep(0.05)
    time.sleep(SETTLE_SECONDS)


def turns(url: str, spec: WorkerSpec, n: int) -> dict[str, Any]:
    """Queue ``n`` turns at once into the idle worker ``spec`` starts; measure
    its drain. Commits: ``xact_commit`` of the database from just before the
    load to the worker's exit (its shutdown included), less the bench's own."""
    window = measure.CommitWindow(url)
    window.calibrate()  # also: nothing else is connected
    out = tempfile.NamedTemporaryFile(prefix="bench-turns-")
    output = Path(out.name)
    proc = subprocess.Popen(
        spec.argv, cwd=REPO, env=spec.env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
    )
    try:
        deadline = time.monotonic() + 60
        while not spec.ready(output):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{spec.name} did not start: {output.read_bytes()[-2000:]!r}")
            time.sleep(0.1)
        time.sleep(1.0)  # LISTEN up, first (empty) claims made
        _pause(proc, window.stats)
        window.start()
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.2)
        cpu_before = measure.process_cpu_seconds(proc.pid)
        idle = _status(proc.pid)
        probe = window.probe()
        backends_idle = window.stats.backends() - {probe.pid}
        with probe.transaction() as conn:
            spec.enqueue(conn, n)
        peak = {"VmRSS": 0, "Threads": 0}
        connections = len(backends_idle)
        deadline = time.monotonic() + 120
        while probe.value(spec.done) < n:
            if proc.poll() is not None:
                raise RuntimeError(f"{spec.name} exited: {output.read_bytes()[-2000:]!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{spec.name}: {n} turns not done in 120 s")
            for key, value in _status(proc.pid).items():
                peak[key] = max(peak[key], value)
            connections = max(connections, len(window.stats.backends() - {probe.pid}))
            time.sleep(0.05)
        cpu = measure.process_cpu_seconds(proc.pid) - cpu_before
        first_to_last, after_last_claim = probe.execute(spec.timing).fetchone()
    except BaseException:
        _stop(proc)
        window.close()
        raise
    finally:
        out.close()
    _stop(proc)
    try:
        commits = window.stop()
    finally:
        window.close()
    return {
        "shape": spec.shape,
        "runs": n,
        "first_claim_to_last_finish_s": round(float(first_to_last), 3),
        "last_claim_to_last_finish_s": round(float(after_last_claim), 3),
        "rss_mib_idle": round(idle["VmRSS"] / 1024, 1),
        "rss_mib_peak": round(peak["VmRSS"] / 1024, 1),
        "threads_idle": idle["Threads"],
        "threads_peak": peak["Threads"],
        "server_connections_idle": len(backends_idle),
        "server_connections_peak": connections,
        "cpu_ms_per_run": round(cpu * 1000 / n, 3),
        "commits": commits,
        "commits_per_run": round(commits / n, 3),
    }


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def peer_turns(system: str, n: int, seconds: float) -> dict[str, Any]:
    """A peer's worker in a database of its own (schema installed first)."""
    import asyncio

    if system == "procrastinate":
        import procrastinate as package

        from tools.bench.peers.procrastinate_peer import _install
    else:
        import pgqueuer as package

        from tools.bench.peers.pgqueuer_peer import _install
    with common.scratch_database(f"turns_{system}") as url:
        asyncio.run(_install(url))
        result = turns(url, _peer_spec(system, url, n, seconds), n)
    return result | {"version": package.__version__}


# --- the run ----------------------------------------------------------------------------------

#: The parts ``--parts`` may name, in the order they run.
PARTS = ("cancel", "turns", "peers")
PEERS = ("procrastinate", "pgqueuer")


def _runqueue_turns(url: str, n: int, slots: str, kind: str) -> dict[str, Any]:
    from django.db import connections

    rq_db.reset()
    connections.close_all()  # the count needs every backend but the worker's gone
    return turns(url, _runqueue_spec(url, slots, kind, MODEL_CALL_S), n)


def run_all(url: str, samples: int, n: int, parts: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "cancel" in parts:
        log(f"cancel -> async handler on a loop slot, {samples} cancels")
        out["cancel_async"] = cancel_latency(samples, "interactive=1:loop", "bench.cancel_async")
        log(f"cancel -> sync handler on a slot thread, {samples} cancels")
        out["cancel_sync"] = cancel_latency(samples, "interactive=1", "bench.cancel_sync")
    if "turns" in parts:
        log(f"{n} async turns on --slots async={n}:loop")
        out["turns_async"] = _runqueue_turns(url, n, f"async={n}:loop", "bench.turn_async")
        log(f"{n} sync turns on --slots async=256 (threads)")
        out["turns_sync"] = _runqueue_turns(url, n, "async=256", "bench.turn_sync")
    if "peers" in parts:
        for system in PEERS:
            log(f"{n} turns on {system}'s async worker, concurrency {n}")
            try:
                out[f"turns_{system}"] = peer_turns(system, n, MODEL_CALL_S)
            except Exception as exc:  # a peer that cannot run is reported, the rest go on
                log(f"{system}: NOT RUN: {exc!r}")
                out[f"turns_{system}"] = {"not_run": repr(exc)[:500]}
    rq_db.reset()
    return out


#: The turns' columns: result key, heading.
COLUMNS = (
    ("turns_async", "runqueue async"),
    ("turns_sync", "runqueue sync"),
    ("turns_procrastinate", "Procrastinate"),
    ("turns_pgqueuer", "PgQueuer"),
)
TURN_FIGURES = (
    "first_claim_to_last_finish_s",
    "last_claim_to_last_finish_s",
    "rss_mib_idle",
    "rss_mib_peak",
    "threads_peak",
    "server_connections_peak",
    "cpu_ms_per_run",
    "commits_per_run",
)


def table(result: dict[str, Any]) -> str:
    lines = []
    if "cancel_async" in result:
        lines.append(f"{'cancel -> handler':<34}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
        for name in ("cancel_async", "cancel_sync"):
            for what in ("to_handler", "to_free"):
                r = result[name][what]
                lines.append(
                    f"{name + ' ' + what:<34}{r.get('p50_ms')!s:>10}{r.get('p99_ms')!s:>10}"
                    f"{r.get('max_ms')!s:>10}"
                )
        lines.append("")
    columns = [(key, head) for key, head in COLUMNS if key in result]
    if columns:
        lines.append(f"{'turns':<30}" + "".join(f"{head:>16}" for _, head in columns))
        for figure in TURN_FIGURES:
            cells = []
            for key, _ in columns:
                r = result[key]
                cells.append("NOT RUN" if "not_run" in r else str(r.get(figure)))
            lines.append(f"{figure:<30}" + "".join(f"{c:>16}" for c in cells))
        lines.append("")
        for key, head in columns:
            r = result[key]
            lines.append(f"{head}: {r.get('shape') or r.get('not_run')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.async_turns", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="40 cancels and 200 turns")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"comma-separated, of {', '.join(PARTS)} (default: all)",
    )
    parser.add_argument("--turns", type=int, default=None, help="turns per worker (overrides)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    parts = tuple(p for p in args.parts.split(",") if p)
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    samples, n = (40, 200) if args.quick else (200, 1000)
    n = args.turns or n
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
            result |= run_all(url, samples, n, parts)
        finally:
            from django.db import connections

            connections.close_all()
    result["load_average_end"] = os.getloadavg()
    result["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out or RESULTS / ("async-turns-quick.json" if args.quick else "async-turns.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(result))
    print(f"\nload average {result['load_average']} -> {result['load_average_end']}")
    print(f"JSON: {out}  ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
