"""runqueue behind a real PgBouncer in transaction mode: more worker slots
than server connections, nothing of runqueue's left on a pooled server
connection for the next client, nothing prepared that another client could
run, and a LISTEN that would hear nothing through it found out.

The workers are real ``runworker`` processes whose default database is the
pooler (``RUNQUEUE["POOLER"] = "transaction"``) and whose LISTEN goes
straight to the server (``LISTEN_DATABASE``), as docs/operations.md's deployment
section says to run them.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

import runqueue
from runqueue.models import EventLog, Run, RunStatus
from tests.helpers import wait_until
from tools.topology import pgbouncer

pytestmark = pytest.mark.django_db(transaction=True)

POOLED = {"POOLER": "transaction", "LISTEN_DATABASE": "direct"}


@pytest.fixture
def bouncer(transactional_db) -> Iterator[pgbouncer.Bouncer]:
    try:
        with pgbouncer.start(connection.settings_dict, "transaction", pool_size=2) as started:
            yield started
    except pgbouncer.Unavailable as exc:
        pytest.skip(str(exc))


def _session_settings(bouncer: pgbouncer.Bouncer, clients: int = 6) -> list[tuple]:
    """What each pooled server connection carries for its session, as the
    next clients of the pooler find it (several clients, several
    transactions each, so every server connection of the pool is asked)."""
    found = []
    conns = [psycopg.connect(bouncer.conninfo(), autocommit=True) for _ in range(clients)]
    try:
        for _ in range(3):
            for conn in conns:
                found += conn.execute(
                    "SELECT pg_backend_pid(), name, setting FROM pg_settings"
                    " WHERE source = 'session' AND name NOT IN"
                    " ('application_name', 'client_encoding', 'DateStyle', 'TimeZone',"
                    " 'extra_float_digits', 'standard_conforming_strings')"
                ).fetchall()
    finally:
        for conn in conns:
            conn.close()
    return found


def _prepared_on_pool(bouncer: pgbouncer.Bouncer) -> list[str]:
    """Statements prepared on the pool's server connections (psycopg's own
    connection here prepares nothing: prepare_threshold None)."""
    found: list[str] = []
    with psycopg.connect(bouncer.conninfo(), autocommit=True, prepare_threshold=None) as conn:
        for _ in range(6):
            found += [
                row[0]
                for row in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
            ]
    return found


def test_workers_through_a_transaction_pooler_finish_every_run_once(
    bouncer,
    start_worker,
) -> None:
    """Two workers with 4 slots each (8) over 2 server connections: every
    run succeeds exactly once, its tool effect happens once, and the pooled
    connections carry no setting and no prepared statement of runqueue's."""
    runs = [
        runqueue.submit(kind="test.tools", payload={"idempotency": "non_idempotent"}).run.id
        for _ in range(60)
    ]
    workers = [
        start_worker("--slots", "interactive=4", settings=POOLED, through=bouncer.through)
        for _ in range(2)
    ]
    wait_until(
        lambda: Run.objects.filter(id__in=runs, status=RunStatus.SUCCEEDED).count() == len(runs),
        timeout=120,
        what="every run to succeed through the pooler",
    )
    finishes = EventLog.objects.filter(run_id__in=runs, type="run.succeeded").count()
    assert finishes == len(runs)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT run_id, count(*) FROM runqueue_test_ledger WHERE what = 'effect'"
            " GROUP BY run_id HAVING count(*) <> 1"
        )
        assert cursor.fetchall() == []
    assert _session_settings(bouncer) == []
    assert _prepared_on_pool(bouncer) == []
    for worker in workers:
        assert "Traceback" not in worker.output(), worker.output()


def test_a_listen_through_the_pooler_is_found_deaf(bouncer, start_worker) -> None:
    """Without a LISTEN_DATABASE the worker LISTENs through the pooler,
    hears nothing, says so, and still runs work by polling."""
    worker = start_worker(
        "--slots",
        "interactive=1",
        settings={"POOLER": "transaction", "POLL_SECONDS": 0.5},
        through=bouncer.through,
    )
    wait_until(
        lambda: "heard no NOTIFY" in worker.output(), timeout=60, what="the deaf LISTEN's warning"
    )
    run = runqueue.submit(kind="test.record").run
    wait_until(
        lambda: Run.objects.get(id=run.id).status == RunStatus.SUCCEEDED,
        timeout=60,
        what="the run to succeed by polling",
    )


def test_a_prepare_threshold_through_a_transaction_pooler_is_refused(
    bouncer,
    start_worker,
) -> None:
    """The URL's prepare_threshold would have one client run another's
    statement: the worker does not start, and says why."""
    worker = start_worker(
        "--slots",
        "interactive=1",
        settings=POOLED,
        through=bouncer.through | {"OPTIONS": {"prepare_threshold": 5}},
    )
    assert worker.wait(60) != 0
    assert "runqueue.E005" in worker.output()
