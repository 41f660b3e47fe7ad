"""``python -m bench [--quick] [--skip NAME ...]``: every figure, one table, one JSON."""

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

from bench import common, report, rq

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS = ("runqueue", "raw", "procrastinate", "pgqueuer", "celery")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _run_system(name: str, profile: common.Profile) -> dict[str, Any]:
    if name == "raw":
        from bench import raw

        with common.scratch_database("raw") as url:
            return raw.run_all(
                url, profile.drain_runs, profile.slots, profile.latency_samples, log
            )
    if name == "procrastinate":
        from bench.peers import procrastinate_peer

        with common.scratch_database("procrastinate") as url:
            return procrastinate_peer.run_all(url, profile, log)
    if name == "pgqueuer":
        from bench.peers import pgqueuer_peer

        with common.scratch_database("pgqueuer") as url:
            return pgqueuer_peer.run_all(url, profile, log)
    if name == "celery":
        from bench.peers import celery_peer

        return celery_peer.run_all(profile, log)
    raise ValueError(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke profile, well under a minute")
    parser.add_argument("--skip", action="append", default=[], choices=SYSTEMS)
    parser.add_argument("--only", action="append", default=[], choices=SYSTEMS)
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON path (default bench/results/)"
    )
    parser.add_argument(
        "--parts", default=",".join(rq.PARTS), help="runqueue figures to take (comma list)"
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per drain (override)")
    args = parser.parse_args(argv)
    profile = common.QUICK if args.quick else common.FULL
    if args.runs:
        profile = dataclasses.replace(profile, drain_runs=args.runs)
    chosen = [s for s in SYSTEMS if s not in args.skip and (not args.only or s in args.only)]
    result: dict[str, Any] = {
        "profile": profile.name,
        "slots": profile.slots,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "postgresql": common.server_version(),
        },
        "caveat": "shared 2-core machine, noisy: compare ratios within one run only",
        "systems": {},
    }
    started = time.perf_counter()
    with common.scratch_database("runqueue") as rq_url:
        from bench import rq_db

        rq_db.setup_django(rq_url)
        for name in chosen:
            try:
                if name == "runqueue":
                    result["systems"][name] = rq.run_all(
                        profile, rq_url, log, tuple(args.parts.split(","))
                    )
                else:
                    result["systems"][name] = _run_system(name, profile)
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported
                log(f"{name}: could not run: {exc!r}")
                result["systems"][name] = {"error": repr(exc), "trace": traceback.format_exc()}
        from django.db import connections

        connections.close_all()
    result["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out or RESULTS / ("quick.json" if args.quick else "latest.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(report.table(result))
    print(f"\nJSON: {out}  ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
