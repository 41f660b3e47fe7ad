"""Where a run's WAL goes: bytes per run by relation (heap, each index) for
``submit_many`` and for an 8-slot drain, read with ``pg_walinspect`` and kept
to the records of a scratch database, so other databases' writes on the same
server are not counted (unlike ``pg_current_wal_lsn()`` in ``python -m tools.bench``).

    python -m tools.bench.wal_breakdown [CHECKOUT]   # N=4000 by default; needs superuser

CHECKOUT (default: this one) is the runqueue to measure; its ``.venv`` runs it
if it has one. Each part starts after a CHECKPOINT, so full-page images are
in the figures as a first touch after a checkpoint makes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

from tools.bench.common import SERVER_URL

REPO = Path(__file__).resolve().parents[2]
_SUBMIT = """
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings"); django.setup()
import runqueue
requests = [runqueue.SubmitRequest(kind="bench.noop", payload={{"i": i}}) for i in range({n})]
for start in range(0, {n}, 1000):
    runqueue.submit_many(requests[start:start + 1000])
"""
LOAD = """
INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, kind, payload, status,
                          priority, attempts, max_attempts, lease_epoch, lease_owner, created_at)
SELECT gen_random_uuid(), 'bench', 'bench', '', 'bench.noop', '{}'::jsonb, 'queued', 10, 0, 3,
       0, '', now() - make_interval(secs => (%s - g) / 1e6)
  FROM generate_series(1, %s) g
"""
_RECORDS = r"""
SELECT (regexp_match(block_ref, 'rel \d+/(\d+)/\d+'))[1] AS db,
       (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1] AS relfile,
       sum(record_length) AS bytes, sum(fpi_length) AS fpi, count(*) AS records
  FROM pg_get_wal_records_info(%s, %s)
 GROUP BY 1, 2
"""


def _lsn(server: psycopg.Connection) -> str:
    # The flushed position: pg_walinspect reads no further, and every commit
    # of the part measured has been flushed by the time it returned.
    return server.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]


def _report(server, url: str, oid: int, label: str, start: str, end: str, runs: int) -> None:
    rows = server.execute(_RECORDS, [start, end]).fetchall()
    with psycopg.connect(url, autocommit=True) as conn:
        names = dict(
            conn.execute(
                "SELECT pg_relation_filenode(oid)::text, relname FROM pg_class"
                " WHERE pg_relation_filenode(oid) IS NOT NULL"
            ).fetchall()
        )
    ours = [(names.get(f, f), int(b), int(p), n) for db, f, b, p, n in rows if db == str(oid)]
    total = sum(b for _, b, _, _ in ours)
    print(f"== {label}: {runs} runs, {total / runs:.0f} WAL B/run in this database")
    for name, b, fpi, n in sorted(ours, key=lambda r: -r[1]):
        if b / runs >= 1:
            print(
                f"  {name:58} {b / runs:6.0f} B/run  (full pages {fpi / runs:4.0f})"
                f"  {n / runs:5.2f} records/run"
            )


def main() -> None:
    src = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else REPO
    n = int(os.environ.get("N", "4000"))
    venv = src / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable
    db = f"bench_wal_{uuid.uuid4().hex[:8]}"
    url = SERVER_URL.rsplit("/", 1)[0] + f"/{db}"
    env = dict(
        os.environ,
        DATABASE_URL=url,
        RUNQUEUE_HANDLER_MODULES="tools.bench.handlers",
        RUNQUEUE_LOG_LEVEL="WARNING",
        PYTHONPATH=f"{src}:{REPO}",
    )
    with psycopg.connect(SERVER_URL, autocommit=True) as server:
        server.execute(f"CREATE DATABASE {db}")
        try:
            server.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            oid = server.execute(
                "SELECT oid FROM pg_database WHERE datname = %s", [db]
            ).fetchone()[0]
            subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=src, env=env, check=True)
            server.execute("CHECKPOINT")
            start = _lsn(server)
            subprocess.run([python, "-c", _SUBMIT.format(n=n)], cwd=src, env=env, check=True)
            _report(server, url, oid, "submit_many, 1,000 a call", start, _lsn(server), n)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("TRUNCATE runqueue_run, runqueue_run_event")
                conn.execute(LOAD, [n, n])
                conn.execute("ANALYZE")
            server.execute("CHECKPOINT")
            start = _lsn(server)
            subprocess.run(
                [python, "manage.py", "runworker", "--burst", "--slots", "async=8"],
                cwd=src,
                env=env,
                check=True,
            )
            _report(server, url, oid, "drain, runworker --slots async=8", start, _lsn(server), n)
        finally:
            server.execute(f"DROP DATABASE {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
