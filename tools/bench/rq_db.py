"""runqueue's side of the bench database: Django set-up, bulk loads, stats."""

from __future__ import annotations

import os
import time

from tools.bench import src
from tools.bench.common import url_for


def setup_django(url: str) -> None:
    """Point the project's settings at the bench database and migrate it
    (runqueue and ``config`` from ``BENCH_RUNQUEUE_SRC`` if set: ``tools.bench.src``)."""
    src.apply()
    src.verify()
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["RUNQUEUE_HANDLER_MODULES"] = "tools.bench.handlers"
    os.environ.setdefault("RUNQUEUE_LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def cursor():
    from django.db import connection

    return connection.cursor()


def _keyed() -> bool:
    """The measured checkout's runs have a concurrency key (issue 12 on)."""
    from runqueue.models import Run

    return any(f.column == "concurrency_key" for f in Run._meta.concrete_fields)


def load(
    n: int,
    *,
    kind: str = "bench.noop",
    priority: int = 10,
    tenant: str = "bench",
    payload: str = "{}",
) -> tuple[str, list]:
    """Queue ``n`` runs with one INSERT ... SELECT generate_series (no
    submit()): the statement and its parameters, for the measured checkout's
    schema (``--src`` may be a checkout from before the concurrency key)."""
    keyed = _keyed()
    key_column, key_value = ("concurrency_key, ", "%s, ") if keyed else ("", "")
    statement = f"""
        INSERT INTO runqueue_run (id, tenant, {key_column}principal, kind, payload, status,
                                  priority, attempts, max_attempts, lease_epoch, lease_owner,
                                  created_at)
        SELECT gen_random_uuid(), %s, {key_value}'', %s, %s::jsonb, 'queued', %s, 0, 3, 0, '',
               now() - make_interval(secs => (%s - g) / 1e6)
          FROM generate_series(1, %s) g
    """
    params = [tenant, *([tenant] if keyed else []), kind, payload, priority, n, n]
    return statement, params


#: Wake idle workers as a submit would.
WAKE = "SELECT pg_notify('runqueue', '')"


def bulk_load(
    n: int,
    *,
    kind: str = "bench.noop",
    priority: int = 10,
    notify: bool = True,
    tenant: str = "bench",
    payload: str = "{}",
) -> None:
    """Queue ``n`` runs through Django's connection (see ``load``)."""
    with cursor() as cur:
        cur.execute(*load(n, kind=kind, priority=priority, tenant=tenant, payload=payload))
        if notify:
            cur.execute(WAKE)


def reset() -> None:
    with cursor() as cur:
        tables = "runqueue_run, runqueue_worker" + (
            ", runqueue_concurrency_limit" if _keyed() else ""
        )
        cur.execute(f"TRUNCATE {tables} CASCADE")


def count(status: str, kind: str | None = None) -> int:
    """Runs in ``status`` (of ``kind`` if given: workers queue maintenance runs)."""
    with cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM runqueue_run WHERE status = %s AND kind = coalesce(%s, kind)",
            [status, kind],
        )
        return cur.fetchone()[0]


def wait_for(status: str, n: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if count(status) >= n:
            return True
        time.sleep(0.05)
    return False


#: (finished runs, seconds from the first claim to the last finish) of a drain.
WINDOW = (
    "SELECT count(*), coalesce(extract(epoch FROM max(finished_at) - min(started_at)), 0)"
    " FROM runqueue_run WHERE status = 'succeeded' AND kind = 'bench.noop'"
)


def drain_window() -> tuple[int, float]:
    with cursor() as cur:
        cur.execute(WINDOW)
        n, seconds = cur.fetchone()
    return n, float(seconds)


def table_stats(table: str) -> dict[str, int]:
    """Update counters of a table, summed over its partitions if it has any."""
    with cursor() as cur:
        cur.execute(
            "SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0),"
            " coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
            " WHERE relid IN (SELECT relid FROM pg_partition_tree(%s::regclass))",
            [table],
        )
        upd, hot, dead = (int(v) for v in cur.fetchone())
    return {"n_tup_upd": upd, "n_tup_hot_upd": hot, "n_dead_tup": dead}


def sizes() -> dict[str, int]:
    """Bytes of the run table, each of its indexes, and the event table."""
    # Every partition of a partitioned table (migration 0006) or the table
    # itself (a checkout from before it): pg_partition_tree lists both.
    with cursor() as cur:
        cur.execute(
            "SELECT (SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree('runqueue_run')),"
            " (SELECT sum(pg_indexes_size(relid)) FROM pg_partition_tree('runqueue_run')),"
            " (SELECT sum(pg_total_relation_size(relid))"
            "    FROM pg_partition_tree('runqueue_run_event'))"
        )
        heap, indexes, events = (int(v or 0) for v in cur.fetchone())
        cur.execute(
            "SELECT coalesce(pg_partition_root(s.indexrelid)::regclass::text, s.indexrelname),"
            " sum(pg_relation_size(s.indexrelid))::bigint"
            " FROM pg_stat_user_indexes s"
            " WHERE s.relid IN (SELECT relid FROM pg_partition_tree('runqueue_run'))"
            " GROUP BY 1 ORDER BY 1"
        )
        per_index = dict(cur.fetchall())
    return {"run_heap": heap, "run_indexes": indexes, "events_total": events} | {
        f"index:{k}": v for k, v in per_index.items()
    }


def flush_stats() -> None:
    """Backends report table statistics on exit or about once a second."""
    from django.db import connection

    connection.close()
    time.sleep(1.2)


__all__ = ["url_for"]
