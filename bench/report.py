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
    lines.append("")
    lines.append("targets (issue 8):")
    lines.extend("  " + line for line in targets(result))
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


def targets(result: dict[str, Any]) -> list[str]:
    """Issue 8's targets, each with the figures it compares and met / NOT met."""
    s = result["systems"]
    rq = s.get("runqueue", {})
    slots = _slots(result)
    out = []

    def check(label: str, ok: bool | None, detail: str) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "NOT met")
        out.append(f"[{verdict}] {label}: {detail}")

    best_rq = max(_get(rq, "drain_1proc.runs_per_s") or 0, _get(rq, "drain_nproc.runs_per_s") or 0)
    pgq = [_get(s.get("pgqueuer", {}), p) for p in ("drain.runs_per_s", "drain_capped.runs_per_s")]
    pgq_best = max((v for v in pgq if v), default=None)
    check(
        "drain >= PgQueuer's best configuration",
        None if pgq_best is None else best_rq >= pgq_best,
        f"runqueue {best_rq:,.0f}/s (best of 1 and N processes) "
        f"vs PgQueuer {pgq_best or 0:,.0f}/s",
    )
    raw10 = _get(s.get("raw", {}), f"claim10_{slots}conn.runs_per_s")
    rq1 = _get(rq, "drain_1proc.runs_per_s")
    check(
        "drain >= half the raw reference with the same batching",
        None if not (raw10 and rq1) else rq1 >= raw10 / 2,
        f"runqueue {rq1 or 0:,.0f}/s vs raw claim-10 on {slots} connections {raw10 or 0:,.0f}/s",
    )
    peers = {
        p: _get(s.get(p, {}), "pickup.p99_ms") for p in ("procrastinate", "pgqueuer", "celery")
    }
    peers = {p: v for p, v in peers.items() if v is not None}
    p99 = _get(rq, "pickup.p99_ms")
    if peers and p99 is not None:
        best = min(peers, key=peers.get)
        check(
            "pickup p99 <= the best peer's",
            p99 <= peers[best],
            f"runqueue {p99} ms vs {best} {peers[best]} ms (raw LISTEN/NOTIFY "
            f"{_get(s.get('raw', {}), 'notify_latency.p99_ms')} ms)",
        )
    ratio = _get(rq, "reserved_capacity.p99_ratio")
    check(
        "interactive p99, async saturated + backlog, within 2x of empty",
        None if ratio is None else ratio <= 2,
        f"ratio {ratio}",
    )
    cc = _get(rq, "claim_cost.p50_ratio_largest_to_smallest")
    check(
        "claim cost at the largest queue within 1.5x of 1k",
        None if cc is None else cc <= 1.5,
        f"ratio {cc}",
    )
    hot = _get(rq, "heartbeat_hot.hot_ratio")
    check("heartbeat updates HOT", None if hot is None else hot >= 0.99, f"HOT ratio {hot}")
    return out
