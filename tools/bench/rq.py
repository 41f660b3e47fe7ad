"""runqueue's figures: the runworker drains (``rq_drain``), the enqueue rates
(``rq_enqueue``), and in this process: pickup latency, reserved capacity,
claim cost, size and HOT updates after churn, and an in-process drain. Runs
inside a Django process set up by ``rq_db.setup_django``."""

from __future__ import annotations

import gc
import threading
import time
from contextlib import ExitStack
from typing import Any

from tools.bench import budget_soak, handlers, measure, pickup, rq_db, rq_drain, rq_enqueue, waits
from tools.bench.common import Profile, idle_gap, percentiles


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
    # A checkout measured through --src may predate wait_listening.
    wait = getattr(pool.listener, "wait_listening", None) or pool.listener.listening.wait
    if not wait(10):
        raise RuntimeError("the bench pool's LISTEN connection never came up")
    time.sleep(0.2)  # every slot has made its first (empty) claim and waits
    # As runworker settles its heap before it claims (a checkout measured
    # through --src may predate settle_heap); _stop unfreezes it, so the
    # peers measured after it in this process walk their heap as before.
    from runqueue.worker import pool as pool_module

    settle = getattr(pool_module, "settle_heap", None)
    if settle is not None:
        settle()
    return pool


def _stop(pool) -> None:
    """Shut the pool down and wait for its LISTEN thread (it checks every second)."""
    pool.shutdown()
    pool.listener.join(5)
    gc.unfreeze()


def drain_in_process(n: int, slots: int) -> dict[str, Any]:
    """N no-op runs queued at once, drained by ``slots`` slots in this process
    (an extra figure: the headline drains are ``rq_drain``'s)."""
    rq_db.reset()
    pool = _started_pool([f"async={slots}"])
    try:
        rq_db.bulk_load(n)
        ok = rq_db.wait_for("succeeded", n, timeout=max(60, n / 50))
    finally:
        _stop(pool)
    done, seconds = rq_db.drain_window()
    return measure.figures(done, seconds, complete=ok)


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
        cur.execute(
            "SELECT pg_stat_reset_single_table_counters(relid)"
            " FROM pg_partition_tree('runqueue_run')"
        )
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


PARTS = (
    "drain",
    "enqueue",
    "pickup",
    "pickup_hops",
    "reserved",
    "claim",
    "hot",
    "churn",
    "streaming",
    "waits",
    "budgets",
    "pooler",
    "promotion",
)
#: Taken only when asked for (``--parts``).
EXTRA_PARTS = ("inproc",)
#: Left out of ``--quick`` unless asked for: a cluster pair, pg_basebackup
#: after every failover, about a minute (tools/bench/README.md).
NOT_QUICK = ("promotion",)


def drain_shapes(profile: Profile) -> dict[str, tuple[int, ...]]:
    """name: (processes, slots per process[, worker processes each spreads its
    slots over, ``--processes``]) of the headline drains."""
    return {
        "drain_1slot": (1, 1),
        "drain_1proc": (1, profile.slots),
        "drain_nproc": (profile.processes, profile.slots // profile.processes),
        "drain_supervised": (1, profile.slots, profile.processes),
    }


def run_all(profile: Profile, url: str, log, parts: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """Every runqueue figure of one profile (or the ``parts`` asked for). The
    drains' workers start first and settle, paused, while the other figures
    are taken (``rq_drain``)."""
    out: dict[str, Any] = {}
    with ExitStack() as stack:
        drains = None
        if "drain" in parts:
            log("runqueue: starting the drains' runworker processes (paused until their turn)")
            drains = stack.enter_context(rq_drain.Drains(url, drain_shapes(profile)))
        if "enqueue" in parts:
            out |= enqueue(profile, url, log)
        if "inproc" in parts:
            log("runqueue: drain in this process (extra)")
            out["drain_inproc"] = drain_in_process(profile.drain_runs, profile.slots)
        if "pickup" in parts:
            log("runqueue: pickup latency (idle pool)")
            out["pickup"] = pickup_latency(profile.latency_samples)
        if "pickup_hops" in parts:
            log("runqueue: interactive pickup hop by hop (1 slot idle, then beside 8 draining)")
            out["pickup_hops"] = pickup.interactive_pickup(profile.latency_samples)
        if "reserved" in parts:
            log("runqueue: interactive pickup with async saturated")
            out["reserved_capacity"] = reserved_capacity(profile.latency_samples, profile.backlog)
        if "claim" in parts:
            log("runqueue: claim cost")
            out["claim_cost"] = claim_cost(profile.claim_sizes, profile.claim_samples)
        if "hot" in parts:
            log("runqueue: heartbeat HOT ratio")
            out["heartbeat_hot"] = heartbeat_hot(profile.heartbeat_runs)
        if "waits" in parts:
            log(f"runqueue: {profile.waiting_runs} waiting runs, resume after a signal")
            out["waits_held"] = waits.held(profile.waiting_runs, _started_pool, _stop)
            out["waits_resume"] = waits.resume(
                profile.latency_samples, _started_pool, _stop, _pickup_samples
            )
            log(f"runqueue: {profile.timers} timers over {profile.timer_spread_seconds} s")
            out["waits_deadlines"] = waits.deadlines(
                profile.timers, profile.timer_spread_seconds, 3.0, _started_pool, _stop
            )
        if "churn" in parts:
            log(f"runqueue: churn {profile.churn_runs} runs")
            out["churn"] = churn(profile.churn_runs, profile.slots)
        if "streaming" in parts:
            from tools.bench import streaming

            log(f"runqueue: streaming {profile.stream_turns} turns x {profile.stream_deltas}")
            out["streaming"] = streaming.run(profile.stream_turns, profile.stream_deltas, url, log)
        if "budgets" in parts:
            log(
                f"runqueue: budget soak, {profile.budget_seconds:.0f} s, 3 tenants,"
                f" {budget_soak.PROCESSES} runworker x async={budget_soak.SLOTS}"
            )
            out["budget_soak"] = budget_soak.soak(profile, url, log)
        if drains is not None:
            out |= drains.run(profile.drain_runs, log)
    # After the headline drains' workers have gone: the server allows 100
    # connections, and each deployment here has 4 processes of 8 slots.
    if "pooler" in parts:
        from tools.bench import pooler

        out["pooler"] = _may_fail(log, "pooler", lambda: pooler.run(profile, url, log))
    if "promotion" in parts:
        from tools.bench import promotion

        out["promotion"] = _may_fail(
            log, "promotion", lambda: promotion.run(profile.failovers, log)
        )
    rq_db.reset()
    return out


def _may_fail(log, name: str, take) -> dict[str, Any]:
    """A part that needs what may be missing here (PgBouncer, the PostgreSQL
    server binaries) is reported with its error; the others stand."""
    try:
        return take()
    except Exception as exc:  # noqa: BLE001 - reported in the JSON and the table
        log(f"runqueue: {name} could not run: {exc!r}")
        return {"error": repr(exc)}


def enqueue(profile: Profile, url: str, log) -> dict[str, Any]:
    from django.db import connections

    connections.close_all()  # the database's only backends are the ones measured
    window = measure.CommitWindow(url)
    try:
        window.calibrate()
        log("runqueue: submit() one by one")
        submit = rq_enqueue.submit_one_by_one(window, profile.submit_runs)
        log("runqueue: submit_many()")
        many = rq_enqueue.submit_many(window, profile.bulk_runs, profile.bulk_batch)
    finally:
        window.close()
    return {"submit": submit, "submit_many": many}
