"""How the admin console behaves with a million runs.

Loads N runs (default 1,000,000) into a database of its own on the same
server (``runqueue_admin_bench``; the dev and test data are not touched)
with one ``INSERT ... SELECT FROM generate_series``, plus an hour of
``run.claimed`` events and a few uncertain tool invocations, then times each
admin page through Django's test client and prints the median time and the
number of queries. Re-running reuses the loaded data (``--reload`` reloads).

    .venv/bin/python tools/bench/admin_scale.py [--runs 1000000] [--repeat 5] [--reload]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402

DB = "runqueue_admin_bench"

LOAD_RUNS = """
INSERT INTO runqueue_run (id, tenant, principal, session_id, kind, payload, status, priority,
    attempts, max_attempts, lease_epoch, lease_owner, lease_expires_at, failure, created_at,
    started_at, finished_at, concurrency_key)
SELECT gen_random_uuid(), 'tenant-' || (i %% 20), 'user:' || (i %% 5000), 'conv-' || i,
       (ARRAY['chat.turn','research.job','digest.build','agent.turn'])[1 + i %% 4],
       jsonb_build_object('n', i), s.status, (i * 7) %% 30,
       CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, 3,
       CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END,
       CASE WHEN s.status = 'running' THEN 'bench-worker' ELSE '' END,
       CASE WHEN s.status = 'running' THEN now() + interval '30 seconds' END,
       CASE WHEN s.status = 'failed' THEN jsonb_build_object(
           'classification', 'permanent', 'error_type', 'ValueError',
           'message', 'bench failure ' || i, 'traceback', 'Traceback ...', 'attempt', 1) END,
       s.created_at,
       CASE WHEN s.status <> 'queued' THEN s.created_at + interval '1 second' END,
       CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled')
            THEN s.created_at + interval '2 seconds' END,
       'tenant-' || (i %% 20)
  FROM generate_series(1, %(runs)s) AS i,
       LATERAL (SELECT
           CASE WHEN i %% 100 < 90 THEN 'succeeded' WHEN i %% 100 < 93 THEN 'failed'
                WHEN i %% 100 < 98 THEN 'queued' WHEN i %% 100 < 99 THEN 'running'
                ELSE 'cancelled' END AS status,
           now() - make_interval(secs => (%(runs)s - i) * 2.6) AS created_at) AS s
"""

LOAD_EVENTS = """
INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
SELECT id, 'run.claimed', 1,
       jsonb_build_object('priority', priority, 'wait_ms', (random() * 200)::int),
       started_at
  FROM runqueue_run WHERE started_at > now() - interval '1 hour'
"""

LOAD_UNCERTAIN = """
INSERT INTO runqueue_tool_invocation (run_id, seq, tool, idempotency, status, arguments,
    lease_epoch, created_at)
SELECT id, 0, 'charge_card', 'non_idempotent', 'uncertain', '{}'::jsonb, 1, now()
  FROM runqueue_run WHERE status = 'succeeded' ORDER BY created_at DESC LIMIT 40
"""


def use_bench_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{DB}"')  # a constant name
    connections["default"].close()
    settings.DATABASES["default"]["NAME"] = DB
    connections["default"].settings_dict["NAME"] = DB
    call_command("migrate", verbosity=0)


def load(runs: int, reload: bool) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM (SELECT 1 FROM runqueue_run LIMIT %s) t", [runs])
        if cursor.fetchone()[0] >= runs and not reload:
            print(f"reusing the {runs:,} runs already loaded")
            return
        cursor.execute("TRUNCATE runqueue_run CASCADE")
        for name, sql in (
            ("runs", LOAD_RUNS),
            ("events", LOAD_EVENTS),
            ("uncertain", LOAD_UNCERTAIN),
        ):
            started = time.perf_counter()
            cursor.execute(sql, {"runs": runs})
            took = time.perf_counter() - started
            print(f"loaded {name}: {cursor.rowcount:,} rows in {took:.1f} s")
        cursor.execute("VACUUM ANALYZE runqueue_run")
        cursor.execute("ANALYZE runqueue_run_event")
        cursor.execute("ANALYZE runqueue_tool_invocation")


def pages() -> list[tuple[str, str]]:
    runs = reverse("admin:runqueue_run_changelist")
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, session_id FROM runqueue_run WHERE status = 'failed' LIMIT 1")
        run_id, session = cursor.fetchone()
    return [
        ("runs, no filter", runs),
        ("runs, status=failed", runs + "?status__exact=failed"),
        ("runs, status=queued", runs + "?status__exact=queued"),
        ("runs, class=async", runs + "?class=10"),
        ("runs, tenant=tenant-3", runs + "?tenant=tenant-3"),
        ("runs, kind=research.job", runs + "?kind=research.job"),
        ("runs, search session", runs + f"?q={session}"),
        ("runs, page 50", runs + "?p=50"),
        ("dead-lettered", reverse("admin:runqueue_deadletteredrun_changelist")),
        ("uncertain", reverse("admin:runqueue_uncertainrun_changelist")),
        ("run detail", reverse("admin:runqueue_run_change", args=[run_id])),
        ("dashboard", reverse("admin:runqueue_run_dashboard")),
    ]


def measure(repeat: int) -> None:
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    print(f"{'page':28} {'median ms':>10} {'max ms':>8} {'queries':>8}")
    for name, url in pages():
        timings = []
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        print(
            f"{name:28} {statistics.median(timings):10.1f} {max(timings):8.1f} "
            f"{len(ctx.captured_queries):8d}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reload", action="store_true")
    args = parser.parse_args()
    use_bench_database()
    load(args.runs, args.reload)
    measure(args.repeat)


if __name__ == "__main__":
    main()
