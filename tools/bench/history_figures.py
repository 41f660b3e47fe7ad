"""Figures of a database holding history (``tools.bench.history`` loads it).

    .venv/bin/python -m tools.bench.history_figures console --url URL [--repeat 20]
    .venv/bin/python -m tools.bench.history_figures drain --url HISTORY --url EMPTY \\
        [--slots 8 --processes 2] [--runs 15000] [--rounds 2]
    .venv/bin/python -m tools.bench.history_figures retention --url URL
    .venv/bin/python -m tools.bench.history_figures sizes --url URL

``console``: p50/p95 of every admin page, each search (session id, run id,
its 8-character prefix, tenant, principal) and the /metrics scrape, through
Django's test client. ``drain``: no-op runs drained by ``runworker``
processes, alternating the databases in the same minutes (the machine is
shared: compare figures from one invocation only); runs/s and WAL bytes per
run. ``retention``: one retention pass that drops the oldest day (partitioned
layout), or the previous layout's batched delete run for 30 s, runs removed
per second, seconds holding or waiting for the parents' exclusive lock, and
the live table's count of rows updated or deleted (run it twice: the
partitioned retention adds none). ``sizes``: bytes per run of the runs
table (every partition, indexes included) and of the events. Set
``BENCH_RUNQUEUE_SRC`` to measure another checkout's runqueue (tools.bench.src).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

import psycopg

from tools.bench import src

TENANT = "bench-history"


def _django(url: str) -> None:
    src.apply()
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["RUNQUEUE_HANDLER_MODULES"] = "tools.bench.handlers"
    os.environ.setdefault("RUNQUEUE_LOG_LEVEL", "WARNING")
    import django

    django.setup()


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def console(url: str, repeat: int) -> None:
    _django(url)
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    runs = reverse("admin:runqueue_run_changelist")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, session_id, tenant, principal FROM runqueue_run"
            " WHERE status = 'failed' AND finished_at > now() - interval '2 days' LIMIT 1"
        )
        run_id, session, tenant, principal = cursor.fetchone()
    pages = [
        ("runs, no filter", runs),
        ("runs, status=failed", runs + "?status__exact=failed"),
        ("runs, status=queued", runs + "?status__exact=queued"),
        ("runs, class=async", runs + "?class=10"),
        ("runs, tenant filter", runs + f"?tenant={tenant}"),
        ("runs, kind=research.job", runs + "?kind=research.job"),
        ("runs, page 50", runs + "?p=50"),
        ("search: session id", runs + f"?q={session}"),
        ("search: run id", runs + f"?q={run_id}"),
        ("search: id prefix (8)", runs + f"?q={str(run_id)[:8]}"),
        ("search: tenant", runs + f"?q={tenant}"),
        ("search: principal", runs + f"?q={principal}"),
        ("dead-lettered", reverse("admin:runqueue_deadletteredrun_changelist")),
        ("uncertain", reverse("admin:runqueue_uncertainrun_changelist")),
        ("run detail", reverse("admin:runqueue_run_change", args=[run_id])),
        ("dashboard", reverse("admin:runqueue_run_dashboard")),
        ("/metrics", "/metrics"),
    ]
    print(f"{'page':28} {'p50 ms':>8} {'p95 ms':>8}")
    for name, path in pages:
        client.get(path)  # warm: the first read of a page pays the cache
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(path)
            timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        print(f"{name:28} {statistics.median(timings):8.1f} {_p(timings, 0.95):8.1f}")


def drain(urls: list[str], processes: int, slots: int, runs: int, rounds: int) -> None:
    from tools.bench.rq_drain import Workers

    print(f"{'round':>5} {'database':40} {'runs/s':>8} {'WAL B/run':>10}")
    results: dict[str, list[float]] = {u: [] for u in urls}
    for round_no in range(rounds):
        order = urls if round_no % 2 == 0 else list(reversed(urls))
        for url in order:
            rate, wal = _drain_once(Workers, url, processes, slots, runs)
            results[url].append(rate)
            print(f"{round_no:5} {url.rsplit('/', 1)[-1]:40} {rate:8.0f} {wal:10.0f}")
    for url, rates in results.items():
        print(f"{url.rsplit('/', 1)[-1]}: {', '.join(f'{r:.0f}' for r in rates)} runs/s")


def _drain_once(workers_cls, url: str, processes: int, slots: int, runs: int) -> tuple[float, int]:
    tag = f"{TENANT}-{uuid.uuid4().hex[:6]}"
    workers = workers_cls(url, processes, slots, label="history")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.monotonic() + 120
            query = "SELECT count(*) FROM runqueue_worker WHERE stopped_at IS NULL"
            while conn.execute(query).fetchone()[0] < processes:
                workers.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError("runworker processes did not start")
                time.sleep(0.05)
            time.sleep(1)
            wal_before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            conn.execute(
                "INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, kind, payload,"
                " status, priority, attempts, max_attempts, lease_epoch, lease_owner, created_at)"
                " SELECT gen_random_uuid(), %(t)s, %(t)s, '', 'bench.noop', '{}', 'queued', 10,"
                " 0, 3, 0, '', now() - make_interval(secs => (%(n)s - g) / 1e6)"
                " FROM generate_series(1, %(n)s) g",
                {"t": tag, "n": runs},
            )
            live = conn.execute(
                "SELECT coalesce(to_regclass('runqueue_run_live'), 'runqueue_run'::regclass)"
            ).fetchone()[0]
            conn.execute(f"ANALYZE {live}")
            conn.execute("SELECT pg_notify('runqueue', '')")
            deadline = time.monotonic() + max(120, runs / 20)
            left = (
                "SELECT count(*) FROM (SELECT 1 FROM runqueue_run WHERE tenant = %(t)s"
                " AND status IN ('queued', 'running') LIMIT 1) q"
            )
            while conn.execute(left, {"t": tag}).fetchone()[0]:
                workers.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError("drain did not finish")
                time.sleep(0.02)
            wal = conn.execute(
                "SELECT pg_current_wal_lsn() - %s::pg_lsn", [wal_before]
            ).fetchone()[0]
            n, seconds = conn.execute(
                "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))"
                " FROM runqueue_run WHERE tenant = %(t)s AND status = 'succeeded'"
                " AND finished_at > now() - interval '1 hour'",
                {"t": tag},
            ).fetchone()
    finally:
        workers.stop()
    return n / float(seconds), int(wal) // max(n, 1)


def retention(url: str) -> None:
    _django(url)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('runqueue_run_finished') IS NOT NULL")
        partitioned = cursor.fetchone()[0]
    if partitioned:
        from runqueue.history import housekeeping, partitions

        days = partitions._days(partitions.RUNS, attached=True)
        oldest = min(days)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT extract(epoch FROM now() - %s::timestamptz) - 60",
                [partitions._start(oldest + partitions.DAY)],
            )
            older_than = float(cursor.fetchone()[0])
        pruned = housekeeping.prune_terminal(older_than)
        print(
            f"dropped {pruned.days}: {pruned.runs:,} runs, {pruned.events:,} events"
            f" ({pruned.kept_events} kept) in {pruned.seconds:.2f} s"
            f" = {pruned.runs / pruned.seconds:,.0f} runs/s;"
            f" {pruned.lock_seconds * 1000:.0f} ms waiting for or holding exclusive locks"
        )
        live = "runqueue_run_live"
    else:
        from runqueue.history import housekeeping

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT min(finished_at) FROM runqueue_run WHERE finished_at IS NOT NULL"
            )
            oldest = cursor.fetchone()[0]
            cursor.execute("SELECT extract(epoch FROM now() - %s::timestamptz) - 86400", [oldest])
            older_than = float(cursor.fetchone()[0])
        stop = time.monotonic() + 30
        started = time.monotonic()
        deleted = housekeeping.delete_terminal_runs(
            older_than_seconds=older_than, batch=500, heartbeat=lambda: time.monotonic() < stop
        )
        took = time.monotonic() - started
        print(f"batched delete: {deleted:,} runs in {took:.1f} s = {deleted / took:,.0f} runs/s")
        live = "runqueue_run"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = %s", [live]
        )
        print(f"rows of {live} updated or deleted so far: {cursor.fetchone()[0]:,}")


def sizes(url: str) -> None:
    with psycopg.connect(url) as conn:
        for table in ("runqueue_run", "runqueue_run_event"):
            total = conn.execute(
                "SELECT coalesce((SELECT sum(pg_total_relation_size(relid))"
                " FROM pg_partition_tree(%s)), pg_total_relation_size(%s))",
                [table, table],
            ).fetchone()[0]
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608
            print(f"{table}: {total / 2**20:,.0f} MiB, {rows:,} rows")
        runs = conn.execute("SELECT count(*) FROM runqueue_run").fetchone()[0]
        every = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
            " WHERE c.relname LIKE 'runqueue\\_%%' AND c.relkind = 'r'"
        ).fetchone()[0]
        print(f"every runqueue table: {every / max(runs, 1):,.0f} bytes per run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("console", "drain", "retention", "sizes"):
        p = sub.add_parser(name)
        p.add_argument("--url", action="append", required=True)
        if name == "console":
            p.add_argument("--repeat", type=int, default=20)
        if name == "drain":
            p.add_argument("--processes", type=int, default=1)
            p.add_argument("--slots", type=int, default=1)
            p.add_argument("--runs", type=int, default=15000)
            p.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.what == "drain":
        drain(args.url, args.processes, args.slots, args.runs, args.rounds)
    else:
        {"console": console, "retention": retention, "sizes": sizes}[args.what](
            args.url[0], *([args.repeat] if args.what == "console" else [])
        )


if __name__ == "__main__":
    main()
