"""Where a run's WAL goes: bytes per run by relation (heap, each index) for
``submit_many``, for an 8-slot drain and for the heartbeats of runs claimed
from a backlog (bytes per heartbeat, and how many were HOT updates), read
with ``pg_walinspect`` and kept
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
# Runs claimed from a backlog, 16 a claim as a slot group's rounds take
# them, then heartbeated ROUNDS times, each a statement of its own (as the
# worker's heartbeat thread does): one line when claimed, then it waits for
# one on stdin before heartbeating.
_HEARTBEATS = """
import os, sys, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings"); django.setup()
import runqueue
from runqueue import leases
runqueue.submit_many([runqueue.SubmitRequest(kind="bench.noop", payload={{"i": i}}, priority=10)
                      for i in range({n})])
held = []
for _ in range({claims}):
    held += leases.claim("vm-8006-ac4229/async", limit=16)
print(len(held), flush=True)
sys.stdin.readline()
for _ in range({rounds}):
    assert leases.heartbeat_many(held) == []
"""
HEARTBEAT_ROUNDS = 10
_HOT = "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runqueue_run_live'"
_RECORDS = r"""
SELECT (regexp_match(block_ref, 'rel \d+/(\d+)/\d+'))[1] AS db,
       (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1] AS relfile,
       record_type, sum(record_length) AS bytes, sum(fpi_length) AS fpi, count(*) AS records
  FROM pg_get_wal_records_info(%s, %s)
 GROUP BY 1, 2, 3
"""


def _lsn(server: psycopg.Connection) -> str:
    # The flushed position: pg_walinspect reads no further, and every commit
    # of the part measured has been flushed by the time it returned.
    return server.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]


def _report(
    server, url: str, oid: int, label: str, start: str, end: str, runs: int, per: str = "run"
) -> None:
    rows = server.execute(_RECORDS, [start, end]).fetchall()
    with psycopg.connect(url, autocommit=True) as conn:
        names = dict(
            conn.execute(
                "SELECT pg_relation_filenode(oid)::text, relname FROM pg_class"
                " WHERE pg_relation_filenode(oid) IS NOT NULL"
            ).fetchall()
        )
    # Per relation: bytes, full-page bytes, records, and the records by type
    # (a heap's LOCK, UPDATE, DELETE... tell what wrote them).
    ours: dict[str, list] = {}
    for db, f, kind, b, p, n in rows:
        if db == str(oid):
            entry = ours.setdefault(names.get(f, f), [0, 0, 0, {}])
            entry[0], entry[1], entry[2] = entry[0] + int(b), entry[1] + int(p), entry[2] + n
            entry[3][kind] = (int(b) - int(p), n)
    total = sum(entry[0] for entry in ours.values())
    print(f"== {label}: {runs} {per}s, {total / runs:.0f} WAL B/{per} in this database")
    for name, (b, fpi, n, kinds) in sorted(ours.items(), key=lambda r: -r[1][0]):
        if b / runs >= 1:
            print(
                f"  {name:58} {b / runs:6.0f} B/{per}  (full pages {fpi / runs:4.0f})"
                f"  {n / runs:5.2f} records/{per}"
            )
            if len(kinds) > 1:
                print(
                    "      "
                    + ", ".join(
                        f"{kind} {k / runs:.2f} x {kb / k:.0f} B"
                        for kind, (kb, k) in sorted(kinds.items(), key=lambda r: -r[1][1])
                        if k / runs >= 0.01
                    )
                )


def _heartbeats(server, url: str, oid: int, python: str, src: Path, env: dict, n: int) -> None:
    """Heartbeats of runs claimed from a backlog of ``n``: WAL per heartbeat."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE runqueue_run, runqueue_run_event")
    claims = max(1, n // 16 // 2)  # half the backlog
    script = _HEARTBEATS.format(n=n, claims=claims, rounds=HEARTBEAT_ROUNDS)
    with subprocess.Popen(
        [python, "-c", script],
        cwd=src,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        held = int(child.stdout.readline())
        server.execute("CHECKPOINT")
        with psycopg.connect(url, autocommit=True) as conn:
            before = conn.execute(_HOT).fetchone()[0]
        start = _lsn(server)
        child.stdin.write("\n")
        child.stdin.close()
        if child.wait() != 0:
            raise RuntimeError("the heartbeats' script failed")
    end = _lsn(server)
    beats = held * HEARTBEAT_ROUNDS
    _report(server, url, oid, f"heartbeats of {held} running runs", start, end, beats, "heartbeat")
    with psycopg.connect(url, autocommit=True) as conn:
        # A backend's counts are flushed when it exits; a fresh connection reads them.
        after = conn.execute(_HOT).fetchone()[0]
    # A claim is never HOT (its status is in the indexes' predicates): every
    # HOT update counted is a heartbeat, whenever the claims' counts were flushed.
    hot = after - before
    print(f"  HOT updates: {hot} of {beats} heartbeats ({100 * hot / beats:.0f} %)")


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
            _heartbeats(server, url, oid, python, src, env, n)
        finally:
            server.execute(f"DROP DATABASE {db} WITH (FORCE)")


if __name__ == "__main__":
    main()
