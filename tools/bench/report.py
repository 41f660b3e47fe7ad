"""The printed report: the server's commit cost, every system's drains and
enqueues side by side (runs/s, ratio to runqueue, commits per run, CPU per
run), pickup latency, runqueue-only figures, and issue #11's targets."""

from __future__ import annotations

from typing import Any

from tools.bench import targets
from tools.bench.targets import get

CPU_NOTE = {
    "utime+stime of the runworker processes (/proc/<pid>/stat)": "proc",
    "thread CPU (time.thread_time) of the worker threads, summed": "thread",
}


LEGEND = (
    "x runqueue: runs/s over runqueue's in the same block (8 slots: its 1-process drain;"
    " enqueue: submit_many)",
    "commits/run: pg_stat_database.xact_commit of the system's database over the drain or"
    " enqueue, less the bench's own",
    "WAL B/run: pg_current_wal_lsn() over the drain (after the load) or the enqueue, from a"
    " CHECKPOINT at its start (full-page images included), shutdown included",
    "server CPU us/run: every PostgreSQL process's utime+stime over the same span, read from"
    " /proc (backends that exited: the postmaster's cutime+cstime); cluster-wide, one system"
    " at a time; blank when the server is not on this machine",
    "CPU us/run: proc = the runworker processes' utime+stime from idle to the last finish;"
    " thread = the worker threads' CPU;",
    "  process = this process's CPU from the first handler start to the last finish"
    " (peers run in this process); * = did not finish in time",
)


def _rows(result: dict[str, Any]) -> list[tuple[str, str, str, str, str | None]]:
    """(group, system, configuration, path, runqueue path to compare with)."""
    w, p = result["slots"], result.get("processes", 2)
    batch = f"{result.get('bulk_batch', 1000):,}"
    one, multi, bulk = "drain_1slot", "drain_1proc", "submit_many"
    return [
        ("drain, 1 slot", "runqueue", "runworker --slots async=1", "drain_1slot", None),
        ("drain, 1 slot", "raw", "claim-1, 1 connection", "claim1_1conn", one),
        ("drain, 1 slot", "pgqueuer", "batch_size=1", "drain_batch1", one),
        ("drain, 1 slot", "procrastinate", "concurrency=1", "drain_1", one),
        (f"drain, {w} slots", "runqueue", f"runworker async={w}, 1 process", multi, None),
        (
            f"drain, {w} slots",
            "runqueue",
            f"{p} runworker x async={w // p}",
            "drain_nproc",
            multi,
        ),
        (
            f"drain, {w} slots",
            "runqueue",
            f"runworker async={w} --processes {p}",
            "drain_supervised",
            multi,
        ),
        (f"drain, {w} slots", "raw", f"claim-1, {w} connections", f"claim1_{w}conn", multi),
        (f"drain, {w} slots", "raw", f"claim-10, {w} connections", f"claim10_{w}conn", multi),
        (
            f"drain, {w} slots",
            "raw",
            f"claim-10 + finish-10, {w} conns",
            f"claim10_finish10_{w}conn",
            multi,
        ),
        (f"drain, {w} slots", "pgqueuer", "default batching", "drain", multi),
        (f"drain, {w} slots", "pgqueuer", "batch 4, max 8 tasks", "drain_capped", multi),
        (f"drain, {w} slots", "procrastinate", f"concurrency={w}", "drain", multi),
        (f"drain, {w} slots", "celery", f"prefork -c {w}, Redis", "drain", multi),
        (f"drain, {w} slots", "runqueue", f"async={w} in this process", "drain_inproc", multi),
        ("enqueue", "runqueue", "submit() one by one", "submit", None),
        ("enqueue", "runqueue", f"submit_many, {batch} a call", bulk, None),
        ("enqueue", "raw", f"multi-row INSERT, {batch} a statement", "enqueue", bulk),
        ("enqueue", "pgqueuer", f"enqueue(lists), {batch} a call", "enqueue", bulk),
        ("enqueue", "procrastinate", f"batch_defer, {batch} a call", "enqueue", bulk),
    ]


def _n(value: Any, digits: int = 1) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value:,.{digits}f}"


def _table(rows: list[list[str]]) -> list[str]:
    """Text columns left, figures (from the fourth column on) right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = zip(row, widths, strict=True)
        out.append(
            "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(cells))
        )
    return [line.rstrip() for line in out]


def figures_table(result: dict[str, Any]) -> list[str]:
    systems = result["systems"]
    rq = systems.get("runqueue", {})
    header = [
        "",
        "system",
        "configuration",
        "runs/s",
        "x runqueue",
        "commits/run",
        "WAL B/run",
        "server CPU us/run",
        "CPU us/run",
    ]
    rows = [header]
    group = None
    for name, system, label, path, base_path in _rows(result):
        data = systems.get(system)
        figure = get(data, path) if data else None
        if system == "runqueue" and path == "drain_inproc" and figure is None:
            continue  # an extra part, only when asked for
        first = name if name != group else ""
        group = name
        if data is None:
            rows.append([first, system, label, "skipped", "", "", "", "", ""])
            continue
        if "error" in data or figure is None or "not_run" in (figure or {}):
            rows.append([first, system, label, "NOT RUN", "", "", "", "", ""])
            continue
        base = get(rq, f"{base_path}.runs_per_s") if base_path else None
        value = figure.get("runs_per_s")
        ratio = f"{value / base:.2f}x" if base and isinstance(value, int | float) else ""
        cpu = _n(figure.get("cpu_us_per_run"), 0)
        if "cpu_source" in figure:
            cpu += f" ({CPU_NOTE.get(figure['cpu_source'], 'process')})"
        rows.append(
            [
                first,
                system,
                label,
                _n(value) + ("*" if figure.get("incomplete") else ""),
                ratio,
                _n(figure.get("commits_per_run"), 3),
                _n(figure.get("wal_bytes_per_run"), 0),
                _n(figure.get("server_cpu_us_per_run"), 0),
                cpu,
            ]
        )
    pickup = [["", "system", "", "p50 ms", "p99 ms"]]
    for system, path in (
        ("runqueue", "pickup"),
        ("raw", "notify_latency"),
        ("raw", "claim_pickup"),
        ("procrastinate", "pickup"),
        ("pgqueuer", "pickup"),
        ("celery", "pickup"),
    ):
        figure = get(systems.get(system), path)
        if figure:
            label = {
                "notify_latency": "LISTEN/NOTIFY alone",
                "claim_pickup": "LISTEN + claim",
            }.get(path, "idle worker")
            first = "pickup" if len(pickup) == 1 else ""
            p50, p99 = _n(figure.get("p50_ms"), 2), _n(figure.get("p99_ms"), 2)
            pickup.append([first, system, label, p50, p99])
    return _table(rows) + list(LEGEND) + [""] + (_table(pickup) if len(pickup) > 1 else [])


def _server(result: dict[str, Any]) -> list[str]:
    out = []
    for when in ("commit_cost", "commit_cost_after"):
        cc = get(result, f"server.{when}")
        if cc:
            settings = ", ".join(f"{k}={v}" for k, v in sorted(cc.get("settings", {}).items()))
            out.append(
                f"server commit cost ({'start' if when == 'commit_cost' else 'end'} of the run): "
                f"{cc['ms_per_commit']} ms per INSERT+COMMIT, {_n(cc['commits_per_s'])} commits/s"
                f" (one client; p50 {cc['p50_ms']} ms, p99 {cc['p99_ms']} ms; {settings})"
            )
    return out


def _runqueue_only(rq: dict[str, Any]) -> list[str]:
    out = []
    for name in ("drain_1slot", "drain_1proc", "drain_nproc", "drain_supervised"):
        idle = get(rq, f"{name}.idle_before_load")
        if idle:
            out.append(
                f"runworker idle before the load ({name}): about {idle['commits_per_s']}"
                f" commits/s, {idle['cpu_percent']}% CPU (over {idle['seconds']} s);"
                f" start-up {idle.get('startup_cpu_s', '-')} s CPU per process (exec to its"
                " worker row)"
            )
    rc = rq.get("reserved_capacity")
    if rc:
        out.append(
            f"interactive pickup p99: empty queue {rc['empty_queue'].get('p99_ms')} ms, "
            f"async saturated + {rc['backlog']:,} queued {rc['async_saturated'].get('p99_ms')} ms "
            f"(ratio {rc['p99_ratio']})"
        )
    ph = rq.get("pickup_hops")
    if ph:
        idle, busy = ph["idle"], ph["draining"]
        hops = ", ".join(
            f"{k} {v.get('p50_ms')}/{v.get('p99_ms')}" for k, v in idle["hops"].items()
        )
        out.append(
            f"interactive pickup, 1 slot idle: p50 {idle.get('p50_ms')} ms, p99 "
            f"{idle.get('p99_ms')} ms (hops p50/p99 ms: {hops}); beside 8 async slots draining: "
            f"p99 {busy.get('p99_ms')} ms (ratio {ph['p99_ratio']}, async "
            f"{busy.get('async_runs_per_s')} runs/s, {busy.get('backlog_left')} left)"
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
            + f" -> ratio {cc['p50_ratio_largest_to_smallest']} (largest : smallest queue)"
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
    out.extend(_budget_soak(rq.get("budget_soak")))
    out.extend(_pooler(rq.get("pooler")))
    out.extend(_promotion(rq.get("promotion")))
    return out


def _pooler(po: dict[str, Any] | None) -> list[str]:
    """Issue 20: the drain and the pickup through PgBouncer against direct."""
    if not po:
        return []
    if "error" in po:
        return [f"through PgBouncer (issue 20): NOT RUN: {po['error']}"]
    slots = po["processes"] * po["slots_per_process"]
    out = [
        f"through PgBouncer (issue 20; {po.get('pgbouncer', '?')}, transaction mode,"
        f" default_pool_size {po['pool_size']}): {po['processes']} runworker x"
        f" async={po['slots_per_process']} ({slots} slots), {po['runs_per_drain']:,} runs a"
        f" drain, {len(po['rounds'])} round(s) alternating"
    ]
    labels = {
        "direct": "direct, default (prepared)",
        "direct_unprepared": "direct, PREPARED_STATEMENTS=False",
        "pooled": "PgBouncer, default (unprepared)",
    }
    for variant, label in labels.items():
        t = po["total"].get(variant)
        if not t:
            continue
        rounds = ", ".join(_n(r[variant]["runs_per_s"], 0) for r in po["rounds"] if variant in r)
        pooled = variant == "pooled"
        conns = (
            f"{t['backends_not_listen_max']} server connections + LISTEN's"
            if pooled
            else f"{t['backends_max']} backends"
        )
        out.append(
            f"  {label}: {_n(t['runs_per_s'], 0)} runs/s (rounds: {rounds}),"
            f" {t['commits_per_run']} commits/run, {_n(t['cpu_us_per_run'], 0)} CPU us/run,"
            f" at most {conns}" + ("" if t["complete"] else " (did not finish)")
        )
    if "pooled_to_direct" in po:
        out.append(
            f"  pooled / direct: {po['pooled_to_direct']} (rounds {po['per_round']}):"
            f" {_met(po['target_met'])} (target >= 0.90 on <= {po['pool_size']} server"
            " connections)"
        )
    if "unprepared_to_prepared" in po:
        out.append(f"  direct unprepared / prepared: {po['unprepared_to_prepared']}")
    pk = po.get("pickup")
    if pk:
        out.append(
            "  idle interactive pickup p50 / p99 ms: direct"
            f" {pk['direct'].get('p50_ms')} / {pk['direct'].get('p99_ms')}, PgBouncer"
            f" {pk['pooled'].get('p50_ms')} / {pk['pooled'].get('p99_ms')}"
            f" ({pk['direct'].get('n')} samples each, LISTEN direct in both)"
        )
    return out


def _promotion(pr: dict[str, Any] | None) -> list[str]:
    """Issue 20: a standby's promotion to the first claim on it."""
    if not pr:
        return []
    if "error" in pr:
        return [f"promotion to first claim (issue 20): NOT RUN: {pr['error']}"]
    each = ", ".join(f"{s:.2f}" for s in pr["resumed_after_seconds"])
    return [
        f"promotion to first claim (issue 20; {pr['replication']} standby,"
        f" {pr['processes']} runworker x async={pr['slots_per_process']}, multi-host URL):"
        f" {each} s; p50 {pr['p50_seconds']} s, max {pr['max_seconds']} s:"
        f" {_met(pr['target_met'])} (target <= {pr['target_seconds']} s); submits"
        f" {pr['submits_acknowledged']} acknowledged, {pr['submit_errors']} refused while"
        " no primary"
    ]


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def _budget_soak(bs: dict[str, Any] | None) -> list[str]:
    """The budget soak's figures and issue 23's targets beside them."""
    if not bs:
        return []
    b, w = bs["budget"], bs["worst_window"]
    shares = ", ".join(
        f"{t} {s['share']:.1%} (configured {s['configured']:.1%}, {s['error_percent']:+.1f}%)"
        for t, s in bs["shares"].items()
    )
    worst_share = bs["worst_share_error_percent"]
    return [
        f"budget soak (issue 23): {bs['seconds']:.0f} s, {len(bs['tenants'])} tenants"
        f" {':'.join(str(v) for v in bs['tenants'].values())},"
        f" {bs['processes']} runworker x async={bs['slots_per_process']}, budget"
        f" {b['tokens']:,} tokens / {b['requests']} requests per {b['per_seconds']} s:"
        f" {_n(bs['runs_per_s'], 2)} runs/s, {bs['commits_per_run']} commits/run,"
        f" {_n(bs['cpu_us_per_run'], 0)} us CPU/run (proc); {bs['calls']:,} calls"
        f" ({bs['calls_429']} 429s, {bs['pauses']} pauses, {bs['calls_over_estimate']}"
        f" over their estimate), {bs['budget_waits']} waits for the budget;"
        f" {bs['tokens_per_minute']:,} tokens/min of {bs['budget_tokens_per_minute']:,}"
        f" (load average {bs['load_average_before_after']})",
        f"  worst window: {w['tokens']:,} tokens, {w['calls']} calls (budget + one reservation"
        f" {w['budget_plus_one_reservation']:,} tokens, {w['budget_requests']} requests):"
        f" {bs['budget_overruns']} overruns {_met(bs['budget_overruns'] == 0)}"
        f" ({bs['overruns_of_the_budget_alone']} past the budget alone)",
        f"  calls reserved on a paused key: {bs['calls_reserved_while_paused']}"
        f" {_met(bs['calls_reserved_while_paused'] == 0)} ({bs['calls_in_flight_when_paused']}"
        f" in flight when a pause began); claim-then-reject cycles:"
        f" {bs['claim_then_reject_cycles']} of {bs['claims']:,} claims"
        f" {_met(bs['claim_then_reject_cycles'] == 0)}"
        f" ({bs.get('claims_given_back', 0)} given back by a worker: claimed ahead, or the stop)",
        f"  token shares: {shares}: worst {worst_share:.1f}% {_met(worst_share <= 10)}"
        " (target within 10%)",
    ]


def table(result: dict[str, Any]) -> str:
    machine = result["machine"]
    source = result.get("runqueue_src", {})
    lines = [
        f"runqueue benchmarks ({result['profile']}, {result['date']}, "
        f"PostgreSQL {machine['postgresql']}, {machine['cpus']} cpus)",
        f"runqueue from {source.get('path', '?')} at {source.get('commit', '?')}",
        "caveat: " + result["caveat"],
        *_server(result),
        f"drains: {result['drain_runs']:,} no-op runs each (runqueue: bulk-loaded into idle"
        " runworker processes; raw, PgQueuer, Procrastinate: queued, then drained in this"
        " process; Celery: a prefork worker started on the loaded queue)",
        "",
        *figures_table(result),
        "",
        *_runqueue_only(result["systems"].get("runqueue", {})),
        "",
        f"targets (issue #{targets.ISSUE}):",
        *("  " + line for line in targets.lines(result.get("targets", []))),
    ]
    for system, data in result["systems"].items():
        if "error" in data:
            lines.append(f"{system}: NOT RUN: {data['error']}")
    return "\n".join(lines)
