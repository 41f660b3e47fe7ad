"""runqueue's side of the bench database: Django set-up, bulk loads, stats."""

from __future__ import annotations

import os
import time

from bench.common import url_for

RUN_COLUMNS = (
    "id, tenant, concurrency_key, principal, kind, payload, status, priority, attempts,"
    " max_attempts, lease_epoch, lease_owner, created_at"
)


def setup_django(url: str) -> None:
    """Point the project's settings at the bench database and migrate it."""
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["RUNQUEUE_HANDLER_MODULES"] = "bench.handlers"
    os.environ.setdefault("RUNQUEUE_LOG_LEVEL", "WARNING")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def cursor():
    from django.db import connection

    return connection.cursor()


def bulk_load(
    n: int,
    *,
    kind: str = "bench.noop",
    priority: int = 10,
    notify: bool = True,
    tenant: str = "bench",
    payload: str = "{}",
) -> None:
    """Queue ``n`` runs with one INSERT ... SELECT generate_series (no submit())."""
    sql = f"""
        INSERT INTO runqueue_run ({RUN_COLUMNS})
        SELECT gen_random_uuid(), %s, %s, '', %s, %s::jsonb, 'queued', %s, 0, 3, 0, '',
               now() - make_interval(secs => (%s - g) / 1e6)
          FROM generate_series(1, %s) g
    """
    with cursor() as cur:
        cur.execute(sql, [tenant, tenant, kind, payload, priority, n, n])
        if notify:
            cur.execute("SELECT pg_notify('runqueue', '')")


def reset() -> None:
    with cursor() as cur:
        cur.execute("TRUNCATE runqueue_run, runqueue_worker, runqueue_concurrency_limit CASCADE")


def count(status: str) -> int:
    with cursor() as cur:
        cur.execute("SELECT count(*) FROM runqueue_run WHERE status = %s", [status])
        return cur.fetchone()[0]


def wait_for(status: str, n: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if count(status) >= n:
            return True
        time.sleep(0.05)
    return False


def drain_window() -> tuple[int, float]:
    """(finished runs, seconds from the first claim to the last finish)."""
    with cursor() as cur:
        cur.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))"
            " FROM runqueue_run WHERE status = 'succeeded'"
        )
        n, seconds = cur.fetchone()
    return n, float(seconds or 0)


def table_stats(table: str) -> dict[str, int]:
    with cursor() as cur:
        cur.execute(
            "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables"
            " WHERE relname = %s",
            [table],
        )
        upd, hot, dead = cur.fetchone()
    return {"n_tup_upd": upd, "n_tup_hot_upd": hot, "n_dead_tup": dead}


def sizes() -> dict[str, int]:
    """Bytes of the run table, each of its indexes, and the event table."""
    with cursor() as cur:
        cur.execute(
            "SELECT pg_relation_size('runqueue_run'), pg_indexes_size('runqueue_run'),"
            " pg_total_relation_size('runqueue_run_event')"
        )
        heap, indexes, events = cur.fetchone()
        cur.execute(
            "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
            " WHERE relname = 'runqueue_run' ORDER BY 1"
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
