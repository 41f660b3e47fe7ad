"""The printed table: runqueue's figures, each peer's, and the ratio to runqueue."""

from __future__ import annotations

from typing import Any

PEERS = ("raw", "procrastinate", "pgqueuer", "celery")


def _get(data: dict[str, Any], path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _cell(value: Any, base: Any) -> str:
    if value is None:
        return "-"
    if isinstance(base, int | float) and base and isinstance(value, int | float):
        return f"{value:,.1f} ({value / base:.2f}x)"
    return f"{value:,.1f}" if isinstance(value, int | float) else str(value)


#: (label, runqueue path, {peer: path}); ratios are peer / runqueue.
ROWS: list[tuple[str, str, dict[str, str]]] = [
    (
        "drain runs/s, 1 process",
        "drain_1proc.runs_per_s",
        {
            "raw": "claim1_{slots}conn.runs_per_s",
            "procrastinate": "drain.runs_per_s",
            "pgqueuer": "drain.runs_per_s",
            "celery": "drain.runs_per_s",
        },
    ),
    (
        "drain runs/s, batched peers",
        "drain_1proc.runs_per_s",
        {"raw": "claim10_{slots}conn.runs_per_s", "pgqueuer": "drain_capped.runs_per_s"},
    ),
    (
        "drain runs/s, 1 connection/slot",
        "drain_1slot.runs_per_s",
        {"raw": "claim1_1conn.runs_per_s"},
    ),
    (
        "drain runs/s, N processes",
        "drain_nproc.runs_per_s",
        {"procrastinate": "drain_nproc.runs_per_s", "celery": "drain_nproc.runs_per_s"},
    ),
    (
        "pickup p50 ms (idle)",
        "pickup.p50_ms",
        {
            "raw": "notify_latency.p50_ms",
            "procrastinate": "pickup.p50_ms",
            "pgqueuer": "pickup.p50_ms",
            "celery": "pickup.p50_ms",
        },
    ),
    (
        "pickup p99 ms (idle)",
        "pickup.p99_ms",
        {
            "raw": "notify_latency.p99_ms",
            "procrastinate": "pickup.p99_ms",
            "pgqueuer": "pickup.p99_ms",
            "celery": "pickup.p99_ms",
        },
    ),
    (
        "bytes per finished run",
        "churn.total_bytes_per_run",
        {"procrastinate": "bytes_per_job", "pgqueuer": "bytes_per_job"},
    ),
]


def table(result: dict[str, Any]) -> str:
    systems = result["systems"]
    rq = systems.get("runqueue", {})
    slots = None
    lines = [
        f"runqueue benchmarks ({result['profile']}, {result['date']}, "
        f"PostgreSQL {result['machine']['postgresql']}, {result['machine']['cpus']} cpus)",
        "caveat: " + result["caveat"],
        "",
    ]
    header = ["metric", "runqueue", *PEERS]
    rows = [header]
    for label, rq_path, peer_paths in ROWS:
        base = _get(rq, rq_path)
        row = [label, _cell(base, None)]
        for peer in PEERS:
            path = peer_paths.get(peer)
            if path and slots is None:
                slots = _slots(result)
            value = _get(systems.get(peer, {}), path.format(slots=slots)) if path else None
            row.append(_cell(value, base))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    lines.append("")
    lines.extend(_runqueue_only(rq))
    for peer in PEERS:
        if "error" in systems.get(peer, {}):
            lines.append(f"{peer}: NOT RUN: {systems[peer]['error']}")
    return "\n".join(lines)


def _slots(result: dict[str, Any]) -> int:
    return result["slots"]


def _runqueue_only(rq: dict[str, Any]) -> list[str]:
    out = []
    rc = rq.get("reserved_capacity")
    if rc:
        out.append(
            f"interactive pickup p99: empty queue {rc['empty_queue'].get('p99_ms')} ms, "
            f"async saturated + {rc['backlog']:,} queued {rc['async_saturated'].get('p99_ms')} ms "
            f"(ratio {rc['p99_ratio']}, target <= 2)"
        )
    cc = rq.get("claim_cost")
    if cc:
        parts = [
            f"{int(k):,}: p50 {v['claim_one']['p50_ms']} ms (claim-10 {v['claim_10']['p50_ms']})"
            for k, v in cc.items()
            if k.isdigit()
        ]
        out.append(
            "claim cost: "
            + "; ".join(parts)
            + f" -> ratio {cc['p50_ratio_largest_to_smallest']} (target <= 1.5)"
        )
    hb = rq.get("heartbeat_hot")
    if hb:
        out.append(f"heartbeat updates HOT: {hb['hot_ratio']} of {hb['updates']['n_tup_upd']}")
    ch = rq.get("churn")
    if ch:
        s = ch["sizes_bytes"]
        out.append(
            f"after churning {ch['runs']:,} runs: run heap {s['run_heap'] / 2**20:.1f} MiB, "
            f"run indexes {s['run_indexes'] / 2**20:.1f} MiB, "
            f"events {s['events_total'] / 2**20:.1f} MiB; all updates HOT ratio {ch['hot_ratio']}"
        )
    return out
