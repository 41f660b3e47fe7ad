"""Celery with its Redis broker: a prefork worker (Celery's default) with
``-c W`` processes, started as a subprocess; a spare Redis database index
that is flushed afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench.common import REDIS_URL, Profile, idle_gap, percentiles

REPO = Path(__file__).resolve().parents[3]
DB_INDEXES = (14, 13, 12, 11)


def _free_database() -> str:
    import redis

    for index in DB_INDEXES:
        if redis.Redis.from_url(f"{REDIS_URL}/{index}").dbsize() == 0:
            return f"{REDIS_URL}/{index}"
    raise RuntimeError(f"no empty Redis database among {DB_INDEXES}")


def _worker(broker: str, concurrency: int) -> subprocess.Popen:
    env = dict(os.environ) | {"BENCH_CELERY_BROKER": broker}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tools.bench.peers.celery_app",
            "worker",
            "--pool",
            "prefork",
            "-c",
            str(concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "WARNING",
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise RuntimeError(f"celery: timed out waiting for {what}")
        time.sleep(0.01)


def run_all(profile: Profile, log) -> dict[str, Any]:
    import celery
    import redis

    broker = _free_database()
    os.environ["BENCH_CELERY_BROKER"] = broker
    from tools.bench.peers import celery_app

    celery_app.app.conf.broker_url = broker
    r = redis.Redis.from_url(broker)
    out: dict[str, Any] = {"version": celery.__version__, "broker": "redis", "pool": "prefork"}
    try:
        log("celery: drain")
        n = profile.drain_runs
        with celery_app.app.producer_or_acquire() as producer:
            for _ in range(n):
                celery_app.noop.apply_async(producer=producer)
        proc = _worker(broker, profile.slots)
        try:
            _wait(lambda: int(r.get("bench:done") or 0) >= n, max(120, n / 20), "the drain")
            first, last = float(r.get("bench:first")), float(r.get("bench:last"))
            out["drain"] = {"runs": n, "runs_per_s": round(n / (last - first), 1)}
            log("celery: pickup latency")
            latencies = []
            for seq in range(profile.latency_samples):
                idle_gap()
                celery_app.noop.apply_async(kwargs={"seq": seq})
                sent = time.time()
                _wait(lambda seq=seq: r.hexists("bench:started", str(seq)), 10, "a pickup")
                latencies.append((float(r.hget("bench:started", str(seq))) - sent) * 1000)
            out["pickup"] = percentiles(latencies)
        finally:
            _stop(proc)
    finally:
        r.flushdb()
    return out
