"""Synthetic history: months of finished runs, for measuring a layout.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_hist \\
        .venv/bin/python -m tools.bench.history --runs 10000000 --days 30

Loads ``--runs`` runs created evenly over the last ``--days`` days into the
database the project's settings name (migrated first), then ANALYZEs (with
``--vacuum``, VACUUM (ANALYZE): the visibility map set on every loaded page,
as autovacuum leaves a production database's finished days, whose rows are
only inserted; the machine this is measured on runs without autovacuum). It
writes through the tables the ORM reads (``runqueue_run``,
``runqueue_run_event``, ``runqueue_tool_invocation``,
``runqueue_checkpoint``, ``runqueue_idempotency_key``), so it works against
any layout beneath them: partitions route each row. Set-based: one
``INSERT ... SELECT FROM generate_series`` per table per batch, ids derived
from the row number (``md5``), so events find their run without a read.

The mix: 98 % terminal (succeeded 93 %, failed 2 %, cancelled 3 %), the rest
waiting for their user (1.6 %), running under a long lease (0.2 %) or queued
a year ahead at the lowest priority (0.2 %): live rows that no drain claims
or sweeps, and that no claim steps over (the claim index is in priority
order and filters on scheduled_for: a run parked ahead of the due ones is
read by every claim). Every
run has its run.created event, every started run run.claimed, every
terminal run its final event; one run in ten made a tool invocation (one in
fifty two), one in twenty saved a checkpoint, one in ten carried an
Idempotency-Key. ``--start`` numbers the rows from there, so a second load
adds to the first.

Where the schema holds events on the run's row (migration 0024), they are
loaded as runqueue writes them: every run's ``run.created`` (its data is the
priority alone), the claim of a running or succeeded run (and from migration
0037 of a failed one) and a success on the row (ids from the events'
sequence, in that order), and the rest as event rows: a cancelled run's
claim (a failed one's before 0037) and its final event.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Row i's shape, shared by every table's statement: the run's id, its status
# and its times. %(start)s..%(stop)s are the batch's row numbers, %(runs)s and
# %(days)s spread created_at evenly over the days up to now.
_ROWS = """
    SELECT i,
           md5('run' || i)::uuid AS id,
           CASE WHEN i %% 1000 < 930 THEN 'succeeded'
                WHEN i %% 1000 < 950 THEN 'failed'
                WHEN i %% 1000 < 980 THEN 'cancelled'
                WHEN i %% 1000 < 996 THEN 'waiting_for_user'
                WHEN i %% 1000 < 998 THEN 'running'
                ELSE 'queued' END AS status,
           %(now)s::timestamptz
             - make_interval(secs => %(days)s * 86400.0 * (1 - (i - %(first)s)::float8 / %(runs)s))
             AS created_at
      FROM generate_series(%(start)s, %(stop)s) AS i
"""

_RUNS = """
INSERT INTO runqueue_run (id, tenant, principal, session_id, kind, payload, status, priority,
    attempts, max_attempts, scheduled_for, lease_epoch, lease_owner, lease_expires_at,
    heartbeat_at, failure, result, created_at, started_at, finished_at, traceparent,
    concurrency_key, wait_reason, waiting_since{held_columns})
SELECT r.id, 'tenant-' || (r.i %% 50), 'user:' || (r.i %% 20000),
       CASE WHEN r.status IN ('succeeded', 'failed', 'cancelled')
            THEN 'conv-' || (r.i %% 500000) ELSE 'live-' || r.i END,
       (ARRAY['chat.turn', 'research.job', 'digest.build', 'agent.turn'])[1 + r.i %% 4],
       jsonb_build_object('prompt', 'history row ' || r.i, 'n', r.i),
       -- A run parked in the queue (due in a year) waits at the end of the
       -- claim order, where every claim need not step over it.
       r.status, CASE WHEN r.status = 'queued' THEN 29 ELSE (r.i * 7) %% 30 END,
       CASE WHEN r.status = 'queued' THEN 0 ELSE 1 END, 3,
       CASE WHEN r.status = 'queued' THEN %(now)s::timestamptz + interval '365 days' END,
       CASE WHEN r.status = 'queued' THEN 0 ELSE 1 END,
       CASE WHEN r.status = 'running' {held_owner} THEN 'history-worker' ELSE '' END,
       CASE WHEN r.status = 'running' THEN %(now)s::timestamptz + interval '365 days' END,
       CASE WHEN r.status <> 'queued' THEN r.created_at + interval '1 second' END,
       CASE WHEN r.status = 'failed' THEN jsonb_build_object(
           'classification', 'permanent', 'error_type', 'ValueError',
           'message', 'history failure ' || r.i, 'attempt', 1) END,
       CASE WHEN r.status = 'succeeded' THEN jsonb_build_object('answer', r.i) END,
       r.created_at,
       CASE WHEN r.status <> 'queued' THEN r.created_at + interval '50 milliseconds' END,
       CASE WHEN r.status IN ('succeeded', 'failed', 'cancelled')
            THEN r.created_at + make_interval(secs => 0.2 + (r.i %% 97) * 0.37) END,
       '', 'tenant-' || (r.i %% 50),
       -- A run waiting for its user says so, as the wait's statement writes it.
       CASE WHEN r.status = 'waiting_for_user' THEN 'user' ELSE '' END,
       CASE WHEN r.status = 'waiting_for_user'
            THEN r.created_at + interval '1 second' END{held_values}
  FROM ({rows}) AS r
"""
#: Events on the run's row (migration 0024): the columns and values the
#: runs' statement adds; evaluated left to right, so created < claim < success.
#: {claims}: the statuses whose row holds its claim (a handler's failure too
#: from migration 0037).
_HELD = {
    "held_columns": ", created_event_id, claim_event_id, claimed_at, claim_wait_ms,"
    " success_event_id, lease_token",
    "held_owner": "OR r.status IN ({claims})",
    "held_values": """,
       nextval('runqueue_run_event_id_seq'),
       CASE WHEN r.status IN ({claims})
            THEN nextval('runqueue_run_event_id_seq') END,
       CASE WHEN r.status IN ({claims})
            THEN r.created_at + interval '50 milliseconds' END,
       CASE WHEN r.status IN ({claims}) THEN r.i %% 40 END,
       CASE WHEN r.status = 'succeeded' THEN nextval('runqueue_run_event_id_seq') END,
       CASE WHEN r.status IN ({claims}) THEN md5('token' || r.i)::uuid END""",
}
CLAIMS_HELD = "'running', 'succeeded'"
CLAIMS_HELD_0037 = "'running', 'succeeded', 'failed'"
RUNS = _RUNS.format(rows=_ROWS, held_columns="", held_owner="", held_values="")
RUNS_HELD = {
    claims: _RUNS.format(
        rows=_ROWS, **{k: v.replace("{claims}", claims) for k, v in _HELD.items()}
    )
    for claims in (CLAIMS_HELD, CLAIMS_HELD_0037)
}

EVENTS = f"""
INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
SELECT r.id, e.type, e.epoch, e.data, e.at
  FROM ({_ROWS}) AS r,
       LATERAL (VALUES
           ('run.created', 0, jsonb_build_object('priority', (r.i * 7) %% 30), r.created_at,
            true),
           ('run.claimed', 1, jsonb_build_object('owner', 'history-worker', 'attempt', 1,
                                                 'wait_ms', r.i %% 40),
            r.created_at + interval '50 milliseconds', r.status <> 'queued'),
           ('run.' || r.status, 1, '{{}}'::jsonb,
            r.created_at + make_interval(secs => 0.2 + (r.i %% 97) * 0.37),
            r.status IN ('succeeded', 'failed', 'cancelled'))
       ) AS e(type, epoch, data, at, present)
 WHERE e.present
   -- What the run's row holds (RUNS_HELD), when %(held)s.
   AND NOT (%(held)s AND (e.type IN ('run.created', 'run.succeeded')
                          OR (e.type = 'run.claimed' AND r.status = ANY(%(claims)s))))
"""

TOOLS = f"""
INSERT INTO runqueue_tool_invocation (run_id, seq, tool, idempotency, status, arguments,
    result, lease_epoch, created_at, finished_at)
SELECT r.id, s.seq, 'search', 'idempotent', 'completed',
       jsonb_build_object('q', 'history ' || r.i), jsonb_build_object('hits', 3), 1,
       r.created_at + interval '100 milliseconds', r.created_at + interval '150 milliseconds'
  FROM ({_ROWS}) AS r, generate_series(0, CASE WHEN r.i %% 50 = 0 THEN 1 ELSE 0 END) AS s(seq)
 WHERE r.i %% 10 = 0 AND r.status <> 'queued'
"""

CHECKPOINTS = f"""
INSERT INTO runqueue_checkpoint (run_id, seq, state, tool_seq, lease_epoch, created_at)
SELECT r.id, 0, jsonb_build_object('step', 1), 1, 1, r.created_at + interval '160 milliseconds'
  FROM ({_ROWS}) AS r
 WHERE r.i %% 20 = 0 AND r.status <> 'queued'
"""

KEYS = f"""
INSERT INTO runqueue_idempotency_key (tenant, principal, key, request_hash, run_id, outcome,
    created_at, expires_at)
SELECT 'tenant-' || (r.i %% 50), 'user:' || (r.i %% 20000), 'history-' || r.i,
       md5('request' || r.i), r.id, 'created', r.created_at, r.created_at + interval '1 day'
  FROM ({_ROWS}) AS r
 WHERE r.i %% 10 = 3
"""

TABLES = (
    "runqueue_run",
    "runqueue_run_event",
    "runqueue_tool_invocation",
    "runqueue_checkpoint",
    "runqueue_idempotency_key",
)


def load(
    *,
    runs: int,
    days: float,
    start: int = 0,
    batch: int = 200_000,
    vacuum: bool = False,
    echo=print,
) -> None:
    """Insert ``runs`` rows of history (and theirs in every other table)."""
    from django.db import connection, transaction
    from django.utils import timezone

    now = timezone.now()
    _make_days(now, days, echo)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns"
            " WHERE table_name = 'runqueue_run' AND column_name = 'claim_event_id')"
        )
        (held,) = cursor.fetchone()
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'runqueue_run_claim_held')"
        )
        (failed_held,) = cursor.fetchone()
    claims = CLAIMS_HELD_0037 if failed_held else CLAIMS_HELD
    begun = time.monotonic()
    for first in range(start, start + runs, batch):
        params = {
            "start": first,
            "stop": min(first + batch, start + runs) - 1,
            "first": start,
            "runs": runs,
            "days": days,
            "now": now,
            "held": held,
            "claims": [status.strip(" '") for status in claims.split(",")],
        }
        runs_statement = RUNS_HELD[claims] if held else RUNS
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in (runs_statement, EVENTS, TOOLS, CHECKPOINTS, KEYS):
                cursor.execute(statement, params)
        done = params["stop"] + 1 - start
        rate = done / (time.monotonic() - begun)
        echo(f"{done:>12,} runs loaded ({rate:,.0f} runs/s)")
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"{'VACUUM (ANALYZE)' if vacuum else 'ANALYZE'} {table}")
    _summarize(echo)
    took = time.monotonic() - begun
    done_with = "vacuumed and analyzed" if vacuum else "analyzed"
    echo(f"loaded {runs:,} runs over {days:g} days in {took:,.0f} s; {done_with}")


def _summarize(echo=print) -> None:
    """The BRIN ranges of yesterday and today summarized, as a worker's
    housekeeping keeps them (``partitions.summarize``, each round); a layout
    without it has nothing to do."""
    try:
        from runqueue.history.partitions import summarize
    except ImportError:
        return
    ranges = sum(summarize().values())
    echo(f"summarized {ranges:,} BRIN ranges of yesterday and today, as housekeeping does")


def _make_days(now: object, days: float, echo=print) -> None:
    """In the partitioned layout, the day partitions of the loaded days, as
    the migration makes them for a database's existing history (otherwise
    every row lands in the default partition and retention has no day to
    drop). A layout without partitions has nothing to make."""
    try:
        from runqueue.history import partitions
    except ImportError:
        return
    import datetime as dt
    import math

    first = (now - dt.timedelta(days=days)).date()  # type: ignore[operator]
    made = partitions.ensure(ahead=math.ceil(days) + partitions.AHEAD_DAYS, today=first)
    echo(f"made {len(made)} day partitions from {first}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--start", type=int, default=0, help="first row number (to add more)")
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--no-migrate", action="store_true")
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="VACUUM (ANALYZE) the loaded tables (autovacuum)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.days <= 0 or args.batch < 1:
        parser.error("--runs and --batch must be at least 1, --days above 0")
    django.setup()
    from django.core.management import call_command

    if not args.no_migrate:
        call_command("migrate", verbosity=0)
    load(runs=args.runs, days=args.days, start=args.start, batch=args.batch, vacuum=args.vacuum)


if __name__ == "__main__":
    main(sys.argv[1:])
