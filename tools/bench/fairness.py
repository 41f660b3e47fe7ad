"""``python -m tools.bench.fairness [--quick]``: one tenant's backlog against
another tenant's pickup, with concurrency caps (issue 12).

Tenant A submits 1,000 long interactive runs; tenant B then submits one run
at a time. With a cap of 1 per key (``RUNQUEUE["CONCURRENCY"] =
{"interactive": 1}``) A holds one of the pool's two interactive slots and
B's runs take the other: B's pickup p99 against the same pool with no run
queued (target: at most 2x). Without a cap A holds both slots and B waits
for one of A's runs to end. Also the claim's own cost past a capped
backlog of 100,000 runs, by the capped walk and by the plain claim.

Runs on ``BENCH_SERVER_URL`` in a database it creates and drops, like
``python -m tools.bench``; prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench import common, handlers, rq, rq_db

RESULTS = Path(__file__).resolve().parent / "results"
POOL = ["interactive=2"]
CAP_ONE = {"CONCURRENCY": {"interactive": 1}}
BACKLOG = 1000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _settings(raw: dict[str, Any]):
    from django.test.utils import override_settings

    return override_settings(RUNQUEUE=raw)


def _pickup(samples: int, *, backlog: int, caps: dict[str, Any]) -> dict[str, Any]:
    """B's pickup with ``backlog`` of A's long runs queued first."""
    rq_db.reset()
    handlers.release.clear()
    with _settings(caps):
        pool = rq._started_pool(POOL)
        try:
            if backlog:
                rq_db.bulk_load(backlog, kind="bench.hold", priority=0, tenant="tenant-a")
                rq_db.wait_for("running", 1, timeout=10)
                time.sleep(0.5)  # the pool settles: A's claims done, the free slot idle
            running_a = rq_db.count("running")
            latencies = rq._pickup_samples(samples, priority=0)
            return common.percentiles(latencies) | {
                "a_running_at_start": running_a,
                "a_queued_at_end": rq_db.count("queued"),
            }
        finally:
            handlers.release.set()
            rq._stop(pool)


def _uncapped_wait(seconds: float) -> dict[str, Any]:
    """Without a cap: A's runs take both slots; does B's run start within ``seconds``?"""
    import runqueue

    rq_db.reset()
    handlers.release.clear()
    pool = rq._started_pool(POOL)
    try:
        rq_db.bulk_load(BACKLOG, kind="bench.hold", priority=0, tenant="tenant-a")
        rq_db.wait_for("running", 2, timeout=10)
        started = time.perf_counter()
        run = runqueue.submit(kind="bench.noop", payload={"seq": -1}, priority=0).run
        while time.perf_counter() - started < seconds:
            if rq_db.count("running") > 2 or _status(run.id) != "queued":
                break
            time.sleep(0.05)  # a poll with a deadline
        waited = time.perf_counter() - started
        with rq_db.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM runqueue_run WHERE status = 'running'"
                " AND tenant = 'tenant-a'"
            )
            a_running = cur.fetchone()[0]
        return {
            "a_running": a_running,
            "b_status_after_s": _status(run.id),
            "waited_s": round(waited, 1),
        }
    finally:
        handlers.release.set()
        rq._stop(pool)


def _status(run_id: Any) -> str:
    with rq_db.cursor() as cur:
        cur.execute("SELECT status FROM runqueue_run WHERE id = %s", [run_id])
        return cur.fetchone()[0]


def claim_cost(samples: int, backlog: int, others: int) -> dict[str, Any]:
    """One claim with ``backlog`` queued runs of a key at its cap (1, one
    running) ahead of ``others`` keys with one run each: the capped claim
    (steps over the backlog) and the plain claim (no caps: takes the head)."""
    from django.db import connection

    from runqueue.leases.claim import _statement, claim_spec
    from runqueue.models import ConcurrencyLimit, PriorityClass

    rq_db.reset()
    rq_db.bulk_load(backlog + 1, kind="bench.noop", priority=0, tenant="tenant-a", notify=False)
    with rq_db.cursor() as cur:
        cur.execute(
            "UPDATE runqueue_run SET status = 'running', attempts = 1, lease_epoch = 1,"
            " lease_owner = 'bench', lease_expires_at = now() + interval '1 hour',"
            " started_at = now() WHERE id = (SELECT id FROM runqueue_run"
            " ORDER BY created_at LIMIT 1)"
        )
    for i in range(others):
        rq_db.bulk_load(1, kind="bench.noop", priority=0, tenant=f"tenant-b{i}", notify=False)
    with rq_db.cursor() as cur:
        cur.execute("VACUUM ANALYZE runqueue_run")

    def timed(capped: bool) -> dict[str, Any]:
        times = []
        for _ in range(samples):
            if capped:
                ConcurrencyLimit.objects.get_or_create(
                    key="tenant-a", priority_class=PriorityClass.INTERACTIVE, max_running=1
                )
            else:
                ConcurrencyLimit.objects.all().delete()
            with connection.cursor() as cur:
                cur.execute("BEGIN")  # rolled back: every sample sees the same queue
                t = time.perf_counter()
                _f, got = _statement((), claim_spec("bench", [PriorityClass.INTERACTIVE], limit=1))
                times.append((time.perf_counter() - t) * 1000)
                cur.execute("ROLLBACK")
            assert len(got) == 1, got
            assert capped == (got[0].run.tenant != "tenant-a"), got[0].run.tenant
        return common.percentiles(times)

    return {"backlog": backlog, "other_keys": others, "capped": timed(True), "plain": timed(False)}


def run_all(samples: int, claim_samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    log("idle pool, no cap: B's pickup")
    out["idle_uncapped"] = _pickup(samples, backlog=0, caps={})
    log("idle pool, cap 1 per key: B's pickup")
    out["idle_capped"] = _pickup(samples, backlog=0, caps=CAP_ONE)
    log(f"A's {BACKLOG} long runs queued, cap 1 per key: B's pickup")
    out["backlog_capped"] = _pickup(samples, backlog=BACKLOG, caps=CAP_ONE)
    log(f"A's {BACKLOG} long runs queued, no cap: does B's run start within 10 s?")
    out["backlog_uncapped"] = _uncapped_wait(10)
    idle, loaded = out["idle_capped"].get("p99_ms"), out["backlog_capped"].get("p99_ms")
    out["p99_ratio_backlog_to_idle"] = round(loaded / idle, 2) if idle else None
    out["target_met"] = out["p99_ratio_backlog_to_idle"] is not None and (
        out["p99_ratio_backlog_to_idle"] <= 2.0
    )
    for others in (1, 1000):
        log(f"claim cost past 100,000 capped runs, {others} other key(s)")
        out[f"claim_cost_{others}_other_keys"] = claim_cost(claim_samples, 100_000, others)
    rq_db.reset()
    return out


def table(result: dict[str, Any]) -> str:
    rows = [("B's pickup", "p50 ms", "p99 ms", "max ms")]
    for name in ("idle_uncapped", "idle_capped", "backlog_capped"):
        r = result[name]
        rows.append((name, str(r.get("p50_ms")), str(r.get("p99_ms")), str(r.get("max_ms"))))
    lines = [f"{a:<28}{b:>10}{c:>10}{d:>10}" for a, b, c, d in rows]
    lines.append(
        f"p99 with A's backlog / idle (cap 1): {result['p99_ratio_backlog_to_idle']}"
        f"  (target <= 2: {'met' if result['target_met'] else 'NOT met'})"
    )
    u = result["backlog_uncapped"]
    lines.append(
        f"no cap: A runs {u['a_running']} of 2 slots; B's run {u['b_status_after_s']} "
        f"after {u['waited_s']} s"
    )
    for others in (1, 1000):
        c = result[f"claim_cost_{others}_other_keys"]
        lines.append(
            f"claim past {c['backlog']:,} capped runs, {others} other key(s): capped "
            f"p50 {c['capped']['p50_ms']} ms, plain p50 {c['plain']['p50_ms']} ms"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.fairness", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="40 samples instead of 300")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    samples = 40 if args.quick else 300
    started = time.perf_counter()
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "postgresql": common.server_version(),
        "samples": samples,
        "pool": POOL,
        "caveat": "shared 2-core machine, noisy: compare ratios within one run only",
    }
    with common.scratch_database("fairness") as url:
        rq_db.setup_django(url)
        try:
            result |= run_all(samples, 20 if args.quick else 100)
        finally:
            from django.db import connections

            connections.close_all()
    result["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out or RESULTS / ("fairness-quick.json" if args.quick else "fairness.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(table(result))
    print(f"\nJSON: {out}  ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
