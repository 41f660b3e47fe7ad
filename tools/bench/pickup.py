"""Interactive pickup in the peers' shape, hop by hop (``--parts pickup_hops``).

An idle in-process pool with one interactive slot (the shape the peers'
harness measures: one worker, one slot), one run at a time 20-40 ms apart:
ms from ``submit``'s commit to the handler's start, and that time cut into
its hops, each stamped with ``time.perf_counter`` in this process:

- ``notify``: commit -> the pool's ``wake`` is called (the NOTIFY reached the
  LISTEN thread; 0 when it did before ``submit`` returned);
- ``claim``: ``wake`` -> the claim that took the run returned (on the LISTEN
  thread since the direct claim; on the group thread before);
- ``start``: that claim -> the handler starts in the slot thread.

Then the same with 8 async slots draining a backlog of no-op runs beside
the interactive slot: its p99 over the idle p99 (target <= 2), and the
async drain's rate while it was measured (the backlog is sized so it does
not run dry; ``backlog_left`` says if it did).

Works on a checkout measured with ``--src`` as long as its pool has
``wake`` and ``runqueue.leases.finish_and_claim``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tools.bench import handlers, rq_db
from tools.bench.common import idle_gap, percentiles

#: Async no-op runs queued before the loaded samples.
BACKLOG_PER_SAMPLE = 150


class Stamps:
    """The hop stamps of the sample in flight (one at a time)."""

    def __init__(self) -> None:
        self.wake = 0.0
        self.claimed = 0.0
        self.claimed_interactive = False


def _instrument(pool: Any, stamps: Stamps, monkeypatch: list) -> None:
    import runqueue.leases as leases_module
    from runqueue.models import PriorityClass

    wake = pool.wake

    def timed_wake(payload: str) -> None:
        if payload in ("", PriorityClass.INTERACTIVE.slug):
            stamps.wake = time.perf_counter()
        wake(payload)

    pool.wake = timed_wake  # the listener takes ``pool.wake`` at start
    claim = leases_module.finish_and_claim

    def timed_claim(finishes, spec):
        written, claimed = claim(finishes, spec)
        if claimed and PriorityClass.INTERACTIVE in spec.classes:
            stamps.claimed = time.perf_counter()
        return written, claimed

    leases_module.finish_and_claim = timed_claim
    monkeypatch.append(lambda: setattr(leases_module, "finish_and_claim", claim))


def _samples(samples: int, stamps: Stamps) -> dict[str, Any]:
    import runqueue

    started: dict[int, float] = {}
    arrived = threading.Event()

    def on_start(payload: Any) -> None:
        if isinstance(payload, dict) and "seq" in payload:
            started[payload["seq"]] = time.perf_counter()
            arrived.set()

    handlers.on_start = on_start
    total, notify, claim, start = [], [], [], []
    try:
        for seq in range(samples):
            idle_gap()
            arrived.clear()
            stamps.wake = stamps.claimed = 0.0
            runqueue.submit(kind="bench.noop", payload={"seq": seq}, priority=0)
            committed = time.perf_counter()
            if not arrived.wait(10):
                raise RuntimeError(f"run {seq} was not picked up within 10 s")
            began = started[seq]
            total.append((began - committed) * 1000)
            if 0 < stamps.wake <= stamps.claimed <= began:
                # The NOTIFY may arrive before submit() returns: 0 then.
                notify.append(max(stamps.wake - committed, 0.0) * 1000)
                claim.append((stamps.claimed - stamps.wake) * 1000)
                start.append((began - stamps.claimed) * 1000)
    finally:
        handlers.on_start = None
    out = percentiles(total)
    out["hops"] = {
        "notify": percentiles(notify),
        "claim": percentiles(claim),
        "start": percentiles(start),
    }
    return out


def interactive_pickup(samples: int) -> dict[str, Any]:
    """Idle, then beside 8 async slots draining a backlog."""
    from tools.bench.rq import _pool, _stop  # tools.bench.rq imports this module

    out: dict[str, Any] = {}
    for name, shape in (("idle", ["interactive=1"]), ("draining", ["interactive=1", "async=8"])):
        rq_db.reset()
        restore: list = []
        stamps = Stamps()
        pool = None
        try:
            pool = _pool(shape)
            _instrument(pool, stamps, restore)
            _start(pool)
            if name == "draining":
                backlog = samples * BACKLOG_PER_SAMPLE
                rq_db.bulk_load(backlog, kind="bench.busy", payload='{"sleep": 0}')
                rq_db.wait_for("running", 1, timeout=10)
                before = time.perf_counter()
                out[name] = _samples(samples, stamps)
                seconds = time.perf_counter() - before
                left = rq_db.count("queued")
                out[name]["backlog"] = backlog
                out[name]["backlog_left"] = left
                out[name]["async_runs_per_s"] = round(
                    (backlog - left - rq_db.count("running")) / seconds
                )
            else:
                out[name] = _samples(samples, stamps)
        finally:
            for undo in restore:
                undo()
            if pool is not None:
                _stop(pool)
    idle, loaded = out["idle"].get("p99_ms"), out["draining"].get("p99_ms")
    out["p99_ratio"] = round(loaded / idle, 2) if idle and loaded else None
    return out


def _start(pool: Any) -> None:
    pool.start()
    wait = getattr(pool.listener, "wait_listening", None) or pool.listener.listening.wait
    if not wait(10):
        raise RuntimeError("the bench pool's LISTEN connection never came up")
    time.sleep(0.2)  # the slots made their first (empty) claims and wait
