"""Durable waits (``--parts waits``): what waiting runs hold, how fast a
signal resumes one, and how late deadlines fire.

- ``held``: ``n`` runs parked waiting, a quarter each for their children, a
  signal, a time and the user, through the worker's own fenced writes; then
  an idle pool runs beside them: the running runs (slots held), the pool's
  leases and the database's connections, before and after they were parked.
- ``resume``: one run at a time parked on a signal, then signalled: ms from
  ``runqueue.signal``'s commit to the resumed handler's start, beside the
  idle pickup (submit's commit to the handler's start) in the same pool.
- ``deadlines``: ``n`` timers due over ``spread`` seconds, resumed by the
  pool's deadline service: lateness p50/p99 (``run.resumed``'s ``late_ms``);
  then again with the pool stopped for ``down`` seconds in the middle and a
  new one started (a worker restart): the timers due while no worker ran
  are late by the gap, the rest are not.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from tools.bench import handlers, rq_db
from tools.bench.common import idle_gap, percentiles

REASONS = ("children", "signal", "timer", "user")


def _park(n: int, reason: str, *, priority: int = 10) -> None:
    """``n`` runs claimed and ended waiting for ``reason`` (as a worker
    writes it), in ``priority``'s class; a parent's child is a maintenance
    run, which the bench pools have no slot for (and ``_park`` never claims
    from that class), so it stays queued and its parent waiting."""
    import runqueue
    from runqueue import leases
    from runqueue.leases.outcomes import Suspended
    from runqueue.models import PriorityClass
    from runqueue.submission import spawning

    cls = PriorityClass.of(priority)
    rq_db.bulk_load(n, kind="bench.noop", priority=priority, notify=False)
    while claimed := leases.claim("bench-park", [cls], limit=100):
        for lease in claimed:
            if reason == "user":
                leases.wait_for_user(lease, {"q": "?"})
                continue
            if reason == "children":
                # A maintenance child no bench pool claims: the parent stays waiting.
                spawning.spawn(lease, 0, kind="bench.noop", priority=PriorityClass.MAINTENANCE)
            leases.write(
                lease,
                Suspended(reason=reason, wait_name="go", until=_far(), state={"b": 1}),
            )
    del runqueue


def _far() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)


def _connections() -> int:
    with rq_db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend'"
        )
        return cur.fetchone()[0]


def held(n: int, started_pool, stop) -> dict[str, Any]:
    """What ``n`` waiting runs hold while an idle pool runs beside them."""
    rq_db.reset()
    pool = started_pool(["interactive=2", "async=2"])
    before = _connections()
    stop(pool)
    for reason in REASONS:
        _park(n // len(REASONS), reason)
    pool = started_pool(["interactive=2", "async=2"])
    try:
        time.sleep(1.0)  # the pool's services tick with the waits parked
        by_status = {s: rq_db.count(s) for s in ("waiting", "waiting_for_user", "running")}
        return {
            "waiting_runs": by_status["waiting"] + by_status["waiting_for_user"],
            "running_runs": by_status["running"],
            "leases_held_by_the_pool": len(pool.held()),
            "connections_before": before,
            "connections_after": _connections(),
        }
    finally:
        stop(pool)


def resume(samples: int, started_pool, stop, pickup_samples) -> dict[str, Any]:
    """Signal-to-handler ms beside the idle pickup, in one idle pool."""
    import runqueue
    from runqueue.models import Run

    rq_db.reset()
    pool = started_pool(["interactive=2", "async=2"])
    started: dict[int, float] = {}
    arrived = threading.Event()

    def on_start(payload: Any) -> None:
        started[payload["seq"]] = time.perf_counter()
        arrived.set()

    try:
        pickup = percentiles(pickup_samples(samples, priority=0))
        handlers.on_start = on_start
        latencies = []
        for seq in range(samples):
            run = runqueue.submit(kind="bench.wait_signal", payload={"seq": seq}).run
            end = time.monotonic() + 10
            while Run.objects.filter(id=run.id, status="waiting").count() == 0:
                if time.monotonic() > end:
                    raise RuntimeError(f"run {seq} never waited")
                time.sleep(0.005)
            idle_gap()
            arrived.clear()
            runqueue.signal(run.id, "go", {"seq": seq})
            committed = time.perf_counter()
            if not arrived.wait(10):
                raise RuntimeError(f"run {seq} was not resumed within 10 s")
            latencies.append((started[seq] - committed) * 1000)
        return {"idle_pickup_ms": pickup, "resume_after_signal_ms": percentiles(latencies)}
    finally:
        handlers.on_start = None
        stop(pool)


def _lateness(since: dt.datetime) -> list[float]:
    with rq_db.cursor() as cur:
        cur.execute(
            "SELECT (data->>'late_ms')::float FROM runqueue_run_event"
            " WHERE type = 'run.resumed' AND data->>'reason' = 'timer' AND created_at >= %s",
            [since],
        )
        return [row[0] for row in cur.fetchall()]


def _park_timers(n: int, spread: float, lead: float) -> dt.datetime:
    """``n`` timers (async runs, which the pool runs once resumed) due evenly
    over ``spread`` seconds from ``lead`` seconds after they are all parked."""
    _park(n, "timer", priority=10)
    with rq_db.cursor() as cur:
        cur.execute(
            "WITH t AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS i FROM runqueue_run"
            " WHERE status = 'waiting') UPDATE runqueue_run r"
            " SET wait_until = now() + make_interval(secs => %s + %s * t.i / %s)"
            " FROM t WHERE r.id = t.id RETURNING now()",
            [lead, spread, n],
        )
        (now,) = cur.fetchone()
    return now + dt.timedelta(seconds=lead)


def deadlines(n: int, spread: float, down: float, started_pool, stop) -> dict[str, Any]:
    """Lateness of ``n`` timers due over ``spread`` s; then across a restart."""
    rq_db.reset()
    since = dt.datetime.now(dt.UTC)
    _park_timers(n, spread, lead=2.0)
    pool = started_pool(["interactive=2", "async=2"])
    try:
        ok = rq_db.wait_for("succeeded", n, timeout=spread + 30)
    finally:
        stop(pool)
    steady = percentiles(_lateness(since))
    rq_db.reset()
    since = dt.datetime.now(dt.UTC)
    start = _park_timers(n, spread, lead=2.0)
    pool = started_pool(["interactive=2", "async=2"])
    time.sleep(max(0.0, (start - dt.datetime.now(dt.UTC)).total_seconds() + spread / 3))
    stop(pool)  # the worker stops; its timers keep coming due
    stopped_at = dt.datetime.now(dt.UTC)
    time.sleep(down)
    pool = started_pool(["interactive=2", "async=2"])
    restarted_at = dt.datetime.now(dt.UTC)
    try:
        ok = rq_db.wait_for("succeeded", n, timeout=spread + 30) and ok
    finally:
        stop(pool)
    return {
        "timers": n,
        "spread_seconds": spread,
        "all_resumed": ok,
        "lateness_ms": steady,
        "restart": {
            "down_seconds": round((restarted_at - stopped_at).total_seconds(), 2),
            "lateness_ms": percentiles(_lateness(since)),
        },
    }
