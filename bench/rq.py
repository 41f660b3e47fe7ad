"""runqueue's figures: drain, pickup latency, reserved capacity, claim cost,
size and HOT updates after churn. Runs inside a Django process set up by
``rq_db.setup_django``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench import handlers, rq_db
from bench.common import Profile, idle_gap, percentiles

REPO = Path(__file__).resolve().parent.parent


def _pool(shape: list[str], *, burst: bool = False):
    from runqueue.worker.pool import Pool, PoolConfig
    from runqueue.worker.spec import SlotSpec

    config = PoolConfig(
        slots=tuple(SlotSpec.parse(s) for s in shape),
        burst=burst,
        worker_id=f"bench-{time.monotonic_ns()}",
        sweep_seconds=5,
        poll_seconds=2,
        grace_seconds=10,
    )
    return Pool(config)


def _started_pool(shape: list[str]):
    pool = _pool(shape)
    pool.start()
    if not pool.listener.listening.wait(10):
        raise RuntimeError("the bench pool's LISTEN connection never came up")
    time.sleep(0.2)  # every slot has made its first (empty) claim and waits
    return pool


def _stop(pool) -> None:
    """Shut the pool down and wait for its LISTEN thread (it checks every second)."""
    pool.shutdown()
    pool.listener.join(5)


def drain_in_process(n: int, slots: int) -> dict[str, Any]:
    """N no-op runs queued at once, drained by ``slots`` slots in this process."""
    rq_db.reset()
    pool = _started_pool([f"async={slots}"])
    try:
        rq_db.bulk_load(n)
        ok = rq_db.wait_for("succeeded", n, timeout=max(60, n / 50))
    finally:
        _stop(pool)
    done, seconds = rq_db.drain_window()
    return {"runs": done, "seconds": round(seconds, 3), "runs_per_s": _rate(done, seconds, ok)}


def drain_processes(n: int, processes: int, slots: int, url: str) -> dict[str, Any]:
    """The same drain by ``processes`` runworker processes of ``slots`` slots each."""
    rq_db.reset()
    env = dict(os.environ) | {"DATABASE_URL": url, "RUNQUEUE_LOG_LEVEL": "WARNING"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "runworker",
                "--slots",
                f"async={slots}",
                "--worker-id",
                f"bench-p{i}",
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(processes)
    ]
    try:
        if not _wait_workers(processes, 60):
            raise RuntimeError("bench runworker processes did not start")
        time.sleep(1.0)  # their LISTEN connections are up and the slots idle
        rq_db.bulk_load(n)
        ok = rq_db.wait_for("succeeded", n, timeout=max(60, n / 50))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    done, seconds = rq_db.drain_window()
    return {
        "runs": done,
        "seconds": round(seconds, 3),
        "runs_per_s": _rate(done, seconds, ok),
        "processes": processes,
        "slots_per_process": slots,
    }


def _wait_workers(n: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with rq_db.cursor() as cur:
            cur.execute("SELECT count(*) FROM runqueue_worker WHERE stopped_at IS NULL")
            if cur.fetchone()[0] >= n:
                return True
        time.sleep(0.1)
    return False


def _rate(done: int, seconds: float, ok: bool) -> float:
    return round(done / seconds, 1) if ok and seconds > 0 else 0.0


def _pickup_samples(samples: int, priority: int) -> list[float]:
    """Submit one run at a time to an idle pool; ms from submit commit to handler start."""
    import runqueue

    started: dict[int, float] = {}
    arrived = threading.Event()

    def on_start(payload: Any) -> None:
        started[payload["seq"]] = time.perf_counter()
        arrived.set()

    handlers.on_start = on_start
    latencies: list[float] = []
    try:
        for seq in range(samples):
            idle_gap()
            arrived.clear()
            runqueue.submit(kind="bench.noop", payload={"seq": seq}, priority=priority)
            committed = time.perf_counter()
            if not arrived.wait(10):
                raise RuntimeError(f"run {seq} was not picked up within 10 s")
            latencies.append((started[seq] - committed) * 1000)
    finally:
        handlers.on_start = None
    return latencies


def pickup_latency(samples: int) -> dict[str, Any]:
    """Idle pool (interactive=2, async=2): the NOTIFY path."""
    rq_db.reset()
    pool = _started_pool(["interactive=2", "async=2"])
    try:
        return percentiles(_pickup_samples(samples, priority=0))
    finally:
        _stop(pool)


def reserved_capacity(samples: int, backlog: int) -> dict[str, Any]:
    """Interactive pickup while every async slot is busy and ``backlog`` async
    runs are queued, against the same pool with an empty queue."""
    rq_db.reset()
    pool = _started_pool(["interactive=2", "async=2"])
    try:
        empty = percentiles(_pickup_samples(samples, priority=0))
        rq_db.bulk_load(backlog, kind="bench.busy")
        # Steady state, not the moment of a bulk insert: fresh statistics
        # (as autovacuum would take), every async slot busy, the WAL settled.
        with rq_db.cursor() as cur:
            cur.execute("ANALYZE runqueue_run")
        rq_db.wait_for("running", 2, timeout=10)
        time.sleep(1.0)
        busy_before = rq_db.count("running")
        loaded = percentiles(_pickup_samples(samples, priority=0))
        queued_after = rq_db.count("queued")
    finally:
        _stop(pool)
    ratio = round(loaded["p99_ms"] / empty["p99_ms"], 2) if empty.get("p99_ms") else None
    return {
        "empty_queue": empty,
        "async_saturated": loaded,
        "async_running_at_start": busy_before,
        "async_queued_at_end": queued_after,
        "backlog": backlog,
        "p99_ratio": ratio,
    }


def claim_cost(sizes: tuple[int, ...], samples: int) -> dict[str, Any]:
    """Time of one claim (and of claim-10) with 1k ... 1M runs queued."""
    from runqueue import leases
    from runqueue.models import PriorityClass

    out: dict[str, Any] = {}
    for size in sizes:
        rq_db.reset()
        started = time.perf_counter()
        rq_db.bulk_load(size, notify=False)
        with rq_db.cursor() as cur:
            cur.execute("VACUUM ANALYZE runqueue_run")
        load_s = time.perf_counter() - started
        one: list[float] = []
        for _ in range(samples):
            t = time.perf_counter()
            leases.claim_one("bench-claim", [PriorityClass.ASYNC])
            one.append((time.perf_counter() - t) * 1000)
        ten: list[float] = []
        for _ in range(max(samples // 10, 10)):
            t = time.perf_counter()
            leases.claim("bench-claim", [PriorityClass.ASYNC], limit=10)
            ten.append((time.perf_counter() - t) * 1000)
        out[str(size)] = {
            "claim_one": percentiles(one),
            "claim_10": percentiles(ten),
            "load_seconds": round(load_s, 1),
        }
    first, last = out[str(sizes[0])], out[str(sizes[-1])]
    out["p50_ratio_largest_to_smallest"] = round(
        last["claim_one"]["p50_ms"] / first["claim_one"]["p50_ms"], 2
    )
    return out


def churn(n: int, slots: int, chunk: int = 10_000) -> dict[str, Any]:
    """Push ``n`` no-op runs through a pool (queued in chunks), then read the
    table and index sizes and the HOT ratio of the run table's updates."""
    rq_db.reset()
    with rq_db.cursor() as cur:
        cur.execute("SELECT pg_stat_reset_single_table_counters('runqueue_run'::regclass)")
    pool = _started_pool([f"async={slots}"])
    started = time.perf_counter()
    try:
        done = 0
        while done < n:
            batch = min(chunk, n - done)
            rq_db.bulk_load(batch)
            done += batch
            if not rq_db.wait_for("succeeded", done, timeout=max(120, batch / 20)):
                raise RuntimeError("churn stalled")
    finally:
        _stop(pool)
    seconds = time.perf_counter() - started
    rq_db.flush_stats()
    stats = rq_db.table_stats("runqueue_run")
    sizes = rq_db.sizes()
    return {
        "runs": n,
        "seconds": round(seconds, 1),
        "sizes_bytes": sizes,
        "run_bytes_per_run": round((sizes["run_heap"] + sizes["run_indexes"]) / n, 1),
        "event_bytes_per_run": round(sizes["events_total"] / n, 1),
        "total_bytes_per_run": round(
            (sizes["run_heap"] + sizes["run_indexes"] + sizes["events_total"]) / n, 1
        ),
        "updates": stats,
        "hot_ratio": _ratio(stats),
    }


def heartbeat_hot(runs: int = 1000, beats: int = 3) -> dict[str, Any]:
    """HOT ratio of heartbeat updates alone (claimed runs renewed ``beats`` times)."""
    from runqueue import leases
    from runqueue.models import PriorityClass

    rq_db.reset()
    rq_db.bulk_load(runs, notify=False)
    held = []
    while batch := leases.claim("bench-hb", [PriorityClass.ASYNC], limit=100):
        held.extend(batch)
    rq_db.flush_stats()
    before = rq_db.table_stats("runqueue_run")
    for _ in range(beats):
        for lease in held:
            leases.heartbeat(lease)
    rq_db.flush_stats()
    after = rq_db.table_stats("runqueue_run")
    delta = {k: after[k] - before[k] for k in ("n_tup_upd", "n_tup_hot_upd")}
    return {"heartbeats": runs * beats, "updates": delta, "hot_ratio": _ratio(delta)}


def _ratio(stats: dict[str, int]) -> float | None:
    return round(stats["n_tup_hot_upd"] / stats["n_tup_upd"], 3) if stats["n_tup_upd"] else None


PARTS = ("drain", "pickup", "reserved", "claim", "hot", "churn")


def run_all(profile: Profile, url: str, log, parts: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """Every runqueue figure of one profile (or the ``parts`` asked for)."""
    out: dict[str, Any] = {}
    if "drain" in parts:
        log("runqueue: drain, one process")
        out["drain_1proc"] = drain_in_process(profile.drain_runs, profile.slots)
        log("runqueue: drain, one slot")
        out["drain_1slot"] = drain_in_process(profile.drain_runs // 2, 1)
        log("runqueue: drain, several processes")
        out["drain_nproc"] = drain_processes(
            profile.drain_runs, profile.processes, profile.slots, url
        )
    if "pickup" in parts:
        log("runqueue: pickup latency (idle pool)")
        out["pickup"] = pickup_latency(profile.latency_samples)
    if "reserved" in parts:
        log("runqueue: interactive pickup with async saturated")
        out["reserved_capacity"] = reserved_capacity(profile.latency_samples, profile.backlog)
    if "claim" in parts:
        log("runqueue: claim cost")
        out["claim_cost"] = claim_cost(profile.claim_sizes, profile.claim_samples)
    if "hot" in parts:
        log("runqueue: heartbeat HOT ratio")
        out["heartbeat_hot"] = heartbeat_hot()
    if "churn" in parts:
        log(f"runqueue: churn {profile.churn_runs} runs")
        out["churn"] = churn(profile.churn_runs, profile.slots)
    rq_db.reset()
    return out
