"""``python -m tools.bench [--quick] [--skip NAME ...]``: every figure, one table, one JSON."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tools.bench import common, measure, src

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS = ("runqueue", "raw", "procrastinate", "pgqueuer", "celery")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _run_system(name: str, profile: common.Profile) -> dict[str, Any]:
    if name == "raw":
        from tools.bench import raw

        with common.scratch_database("raw") as url:
            return raw.run_all(url, profile, log)
    if name == "procrastinate":
        from tools.bench.peers import procrastinate_peer

        with common.scratch_database("procrastinate") as url:
            return procrastinate_peer.run_all(url, profile, log)
    if name == "pgqueuer":
        from tools.bench.peers import pgqueuer_peer

        with common.scratch_database("pgqueuer") as url:
            return pgqueuer_peer.run_all(url, profile, log)
    if name == "celery":
        from tools.bench.peers import celery_peer

        return celery_peer.run_all(profile, log)
    raise ValueError(name)


def _commit_cost(profile: common.Profile) -> dict[str, Any]:
    with common.scratch_database("server") as url:
        return measure.commit_cost(url, profile.commit_samples)


def baseline_rate(value: str | None) -> float | None:
    """``--baseline``: submit() runs/s, given as a number or as an earlier run's JSON."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    data = json.loads(Path(value).read_text())
    rate = data.get("systems", {}).get("runqueue", {}).get("submit", {}).get("runs_per_s")
    if not rate:
        raise SystemExit(f"--baseline {value}: no runqueue submit() figure in that JSON")
    return float(rate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke profile, about two minutes")
    parser.add_argument("--skip", action="append", default=[], choices=SYSTEMS)
    parser.add_argument("--only", action="append", default=[], choices=SYSTEMS)
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON path (default tools/bench/results/)"
    )
    parser.add_argument(
        "--parts", default=None, help="runqueue figures to take (comma list; default: all)"
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per drain (override)")
    parser.add_argument(
        "--budget-window",
        type=int,
        default=None,
        metavar="SECONDS",
        help="the budget soak's window (default: the profile's, 60 s; quick 5 s)",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="RATE_OR_JSON",
        help="submit() runs/s to compare with (a number, or an earlier run's JSON), "
        "e.g. the same bench on another checkout (BENCH_RUNQUEUE_SRC)",
    )
    parser.add_argument(
        "--src",
        default=None,
        metavar="CHECKOUT",
        help=f"measure the runqueue of another checkout (sets {src.ENV}; "
        "see tools/bench/README.md)",
    )
    args = parser.parse_args(argv)
    baseline = baseline_rate(args.baseline)
    if args.src:
        os.environ[src.ENV] = args.src  # runworker subprocesses inherit it
    src.apply()  # before anything imports runqueue
    from tools.bench import report, rq, targets

    if args.parts:
        parts = tuple(args.parts.split(","))
    elif args.quick:
        parts = tuple(p for p in rq.PARTS if p not in rq.NOT_QUICK)
    else:
        parts = rq.PARTS
    unknown = set(parts) - set(rq.PARTS) - set(rq.EXTRA_PARTS)
    if unknown:
        parser.error(f"unknown --parts {sorted(unknown)}; known: {rq.PARTS + rq.EXTRA_PARTS}")
    profile = common.QUICK if args.quick else common.FULL
    if args.runs:
        profile = dataclasses.replace(profile, drain_runs=args.runs)
    if args.budget_window:
        profile = dataclasses.replace(profile, budget_window=args.budget_window)
    chosen = [s for s in SYSTEMS if s not in args.skip and (not args.only or s in args.only)]
    result: dict[str, Any] = {
        "profile": profile.name,
        "slots": profile.slots,
        "processes": profile.processes,
        "drain_runs": profile.drain_runs,
        "bulk_batch": profile.bulk_batch,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "postgresql": common.server_version(),
        },
        "runqueue_src": src.describe(),
        "baseline_submit_runs_per_s": baseline,
        "caveat": "shared 2-core machine, noisy: compare ratios within one run only",
        "server": {},
        "systems": {},
    }
    started = time.perf_counter()
    log("server: commit cost")
    result["server"]["commit_cost"] = _commit_cost(profile)
    with common.scratch_database("runqueue") as rq_url:
        from tools.bench import rq_db

        rq_db.setup_django(rq_url)
        for name in chosen:
            try:
                if name == "runqueue":
                    result["systems"][name] = rq.run_all(profile, rq_url, log, parts)
                else:
                    result["systems"][name] = _run_system(name, profile)
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported
                log(f"{name}: could not run: {exc!r}")
                result["systems"][name] = {"error": repr(exc), "trace": traceback.format_exc()}
            finally:
                from django.db import connections

                connections.close_all()
    log("server: commit cost again")
    result["server"]["commit_cost_after"] = _commit_cost(profile)
    result["targets"] = targets.evaluate(result, baseline)
    result["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out or RESULTS / ("quick.json" if args.quick else "latest.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(report.table(result))
    print(f"\nJSON: {out}  ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
