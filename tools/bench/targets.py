"""Issue #11's targets, checked against one run's figures: MET, NOT MET, or
NOT RUN when a figure they compare is missing (a system not installed, a
part not taken, ``submit_many`` not in the checkout, no ``--baseline``)."""

from __future__ import annotations

from typing import Any

ISSUE = 11
#: The PostgreSQL libraries idle pickup is compared with (Celery on Redis is shown beside).
PICKUP_PEERS = ("procrastinate", "pgqueuer")


def get(data: Any, path: str) -> Any:
    """``a.b.c`` of nested dicts, or None."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
    return f"{text}{unit}"


def _verdict(ok: bool | None) -> str:
    return "NOT RUN" if ok is None else ("MET" if ok else "NOT MET")


def evaluate(result: dict[str, Any], baseline: float | None = None) -> list[dict[str, Any]]:
    """One entry per target: label, verdict, and the figures behind it."""
    s = result["systems"]
    rq = s.get("runqueue", {})
    slots = result["slots"]
    out: list[dict[str, Any]] = []

    def add(label: str, ok: bool | None, detail: str) -> None:
        out.append({"target": label, "verdict": _verdict(ok), "detail": detail})

    def at_most(label: str, path: str, limit: float, unit: str = "") -> None:
        value = _num(get(rq, path))
        ok = None if value is None else value <= limit
        add(label, ok, f"{_fmt(value, unit)} (target <= {_fmt(limit, unit)})")

    at_most("commits per finished run, 1 slot", "drain_1slot.commits_per_run", 1.05)
    at_most(
        f"commits per finished run, {slots} slots in one process",
        "drain_1proc.commits_per_run",
        0.30,
    )
    at_most(
        f"worker CPU per run, {slots} slots in one process",
        "drain_1proc.cpu_us_per_run",
        300,
        " us",
    )

    one = _num(get(rq, "drain_1slot.runs_per_s"))
    pgq1 = _num(get(s, "pgqueuer.drain_batch1.runs_per_s"))
    raw1 = _num(get(s, "raw.claim1_1conn.runs_per_s"))
    parts = [_ratio("PgQueuer batch 1", one, pgq1, 1.0), _ratio("raw claim-1", one, raw1, 0.5)]
    add(
        "drain, 1 slot: >= 1.0x PgQueuer batch 1 and >= 0.5x raw claim-1",
        _all(p[0] for p in parts),
        f"runqueue {_fmt(one, '/s')}; " + "; ".join(p[1] for p in parts),
    )

    multi = [_num(get(rq, p)) for p in ("drain_1proc.runs_per_s", "drain_nproc.runs_per_s")]
    best = max((v for v in multi if v is not None), default=None)
    pgq = _num(get(s, "pgqueuer.drain.runs_per_s"))
    ok, text = _ratio("PgQueuer default", best, pgq, 1.0)
    add(
        f"drain, {slots} slots (best of 1 and {result.get('processes', 2)} processes)"
        " >= 1.0x PgQueuer default",
        ok,
        f"runqueue {_fmt(best, '/s')} (1 process {_fmt(multi[0], '/s')}, "
        f"processes {_fmt(multi[1], '/s')}); {text}",
    )

    many = _num(get(rq, "submit_many.runs_per_s"))
    proc = _num(get(s, "procrastinate.enqueue.runs_per_s"))
    ok, text = _ratio("Procrastinate batch_defer", many, proc, 1.0)
    floor = None if many is None else many >= 10_000
    add(
        "submit_many >= 1.0x Procrastinate batch_defer and >= 10,000 runs/s",
        _all([ok, floor]),
        f"runqueue {_fmt(many, '/s')}"
        + (f" ({rq['submit_many']['not_run']})" if get(rq, "submit_many.not_run") else "")
        + f"; {text}",
    )

    submit = _num(get(rq, "submit.runs_per_s"))
    ok, text = _ratio("--baseline", submit, baseline, 2.5)
    add("submit() one by one >= 2.5x the baseline", ok, f"runqueue {_fmt(submit, '/s')}; {text}")

    p99 = _num(get(rq, "pickup.p99_ms"))
    peers = {p: _num(get(s, f"{p}.pickup.p99_ms")) for p in PICKUP_PEERS}
    known = {p: v for p, v in peers.items() if v is not None}
    best_peer = min(known, key=known.get) if known else None
    celery = _num(get(s, "celery.pickup.p99_ms"))
    add(
        "idle pickup p99 the best of the PostgreSQL libraries",
        None if p99 is None or not known else p99 <= known[best_peer],
        f"runqueue {_fmt(p99, ' ms')}; "
        + ", ".join(f"{p} {_fmt(v, ' ms')}" for p, v in peers.items())
        + f" (celery on Redis {_fmt(celery, ' ms')}, raw NOTIFY "
        f"{_fmt(_num(get(s, 'raw.notify_latency.p99_ms')), ' ms')})",
    )

    p50 = _num(get(rq, "pickup.p50_ms"))
    raw_p50 = _num(get(s, "raw.claim_pickup.p50_ms"))
    add(
        "idle pickup p50 <= raw LISTEN + claim + 1 ms",
        None if p50 is None or raw_p50 is None else p50 <= raw_p50 + 1,
        f"runqueue {_fmt(p50, ' ms')}; raw LISTEN + claim {_fmt(raw_p50, ' ms')}",
    )

    ratio = _num(get(rq, "reserved_capacity.p99_ratio"))
    add(
        "interactive pickup p99 with async saturated <= 2x idle",
        None if ratio is None else ratio <= 2,
        f"ratio {_fmt(ratio)} (empty queue "
        f"{_fmt(_num(get(rq, 'reserved_capacity.empty_queue.p99_ms')), ' ms')}, saturated "
        f"{_fmt(_num(get(rq, 'reserved_capacity.async_saturated.p99_ms')), ' ms')})",
    )
    return out


def _ratio(name: str, value: float | None, other: float | None, least: float) -> tuple:
    """(value >= least * other, or None if either is missing; the figures)."""
    if value is None or not other:
        return None, f"{name} {_fmt(other, '/s')}"
    return value >= least * other, f"{value / other:.2f}x {name} {_fmt(other, '/s')}"


def _all(oks) -> bool | None:
    oks = list(oks)
    if any(ok is None for ok in oks):
        return None
    return all(oks)


def lines(targets: list[dict[str, Any]]) -> list[str]:
    width = max((len(t["verdict"]) for t in targets), default=0)
    return [f"[{t['verdict']:<{width}}] {t['target']}: {t['detail']}" for t in targets]
