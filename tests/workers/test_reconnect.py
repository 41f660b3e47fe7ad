"""A lost connection, a server that turned read-only (SQLSTATE 25006) and
an administrator's shutdown (57P01) mean "reconnect": the worker closes the
connection and tries again after a short jittered wait that never grows,
and no handler or run fails for it. Real errors from the real server: a
backend ended by ``pg_terminate_backend``, sessions made read-only with
``default_transaction_read_only``."""

from __future__ import annotations

import logging
import re
import time

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, connection
from psycopg import sql

import runqueue
from runqueue import db, leases, runtime
from runqueue.db import connection_lost
from runqueue.models import EventLog, PriorityClass, Run, RunStatus
from runqueue.worker import services
from tests.helpers import Worker, wait_until
from tests.pooling import not_through_a_pooler
from tests.workers.test_worker_group import _group, _started, _stop

pytestmark = pytest.mark.django_db(transaction=True)

#: Why the read-only tests are not run through a transaction pooler.
READ_ONLY_SESSIONS = (
    "a session's SET default_transaction_read_only stays on the pooled server connection for"
    " the next client, and ALTER DATABASE ... SET reaches only server connections opened"
    " afterwards, which the pool does not open"
)

_WAIT = re.compile(r"connection lost \(.*\); reconnecting in (?P<s>[0-9.]+)s", re.DOTALL)


@runqueue.handler("test.reconnect.read_only")
def read_only_handler(ctx: runqueue.RunContext) -> dict:
    """Its session turns read-only (as a demoted primary's does), then it
    saves a checkpoint."""
    with connection.cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = on")
    ctx.checkpoint({"step": 1})
    return {"done": True}


def _terminate_others() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        return cursor.fetchone()[0]


def _backend_alive(pid: int) -> bool:
    with db.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]
        ).fetchone()
        return bool(row and row[0])


def _database_read_only(on: bool) -> None:
    """New sessions of the test database start read-only (or not): the
    server as a primary turned standby answers every write."""
    name = sql.Identifier(connection.settings_dict["NAME"])
    statement = (
        sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on")
        if on
        else sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only")
    )
    with db.connect() as conn:
        conn.execute("SET default_transaction_read_only = off")  # this session writes
        conn.execute(statement.format(name))


@not_through_a_pooler(
    "a client's backend pid is PgBouncer's, so pg_terminate_backend cannot end its"
    " backend, and a session's read-only SET would stay on a pooled server connection"
)
def test_what_means_reconnect_is_told_from_real_errors() -> None:
    # A backend ended by an administrator (57P01, or a closed socket).
    victim = db.connect()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])
    with pytest.raises(psycopg.OperationalError) as ended:
        victim.execute("SELECT 1")
    assert connection_lost(ended.value)
    victim.close()

    # A read-only session: 25006 on a write, through psycopg and through Django.
    with db.connect() as conn:
        conn.execute("SET default_transaction_read_only = on")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as read_only:
            conn.execute("CREATE TEMPORARY TABLE runqueue_ro_probe (x int)")
        assert read_only.value.sqlstate == "25006"
        assert connection_lost(read_only.value)

    def django_read_only() -> BaseException:
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
            try:
                Run.objects.create(kind="k")
            except DatabaseError as exc:
                return exc
        raise AssertionError("the write went through")

    thread = Worker(django_read_only)
    thread.start()
    wrapped = thread.outcome()
    assert not isinstance(wrapped, psycopg.Error)  # Django's InternalError
    assert connection_lost(wrapped)

    # A session the server ended for idling in its transaction (25P03): the
    # fence's idle limit ends a frozen worker's so its row locks go.
    with db.connect() as conn:
        conn.execute("SET idle_in_transaction_session_timeout = '50ms'")
        with pytest.raises(psycopg.Error) as idled:
            with conn.transaction():
                conn.execute("SELECT 1")
                wait_until(
                    lambda: (
                        conn.info.transaction_status == psycopg.pq.TransactionStatus.UNKNOWN
                        or not _backend_alive(conn.info.backend_pid)
                    ),
                    what="the server to end the idle transaction",
                )
                conn.execute("SELECT 1")
        assert connection_lost(idled.value), repr(idled.value)

    # A connection that cannot be made at all.
    with pytest.raises(psycopg.OperationalError) as refused:
        db.connect(port=1, connect_timeout=2)
    assert connection_lost(refused.value)

    # A statement's own errors are not.
    with pytest.raises(DatabaseError) as syntax:
        with connection.cursor() as cursor:
            cursor.execute("SELEC 1")
    assert not connection_lost(syntax.value)
    run = Run.objects.create(kind="k")
    with pytest.raises(IntegrityError) as duplicate:
        Run.objects.create(id=run.id, kind="k")
    assert not connection_lost(duplicate.value)


@not_through_a_pooler(READ_ONLY_SESSIONS)
def test_a_read_only_server_under_a_handler_does_not_fail_its_run() -> None:
    """The handler's checkpoint meets 25006: no outcome is decided (the
    database error is raised to the slot, which closes the connection), the
    run is neither failed nor requeued by it, and the lease, still the
    worker's, works again on a fresh connection."""
    run = runqueue.submit(kind="test.reconnect.read_only").run
    lease = leases.claim_one("w", lease_seconds=30)
    assert lease is not None and lease.run_id == run.id
    with pytest.raises(DatabaseError) as raised:
        runtime.decide(lease)
    assert connection_lost(raised.value)
    connection.close()
    run.refresh_from_db()
    assert (run.status, run.failure, run.lease_epoch) == (RunStatus.RUNNING, None, 1)
    assert not EventLog.objects.filter(run_id=run.id, type__in=["run.failed", "run.requeued"])
    assert leases.heartbeat(lease) is True


def _waits(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [
        float(m.group("s"))
        for r in caplog.records
        if r.name == "runqueue.worker" and (m := _WAIT.search(r.getMessage()))
    ]


@not_through_a_pooler(READ_ONLY_SESSIONS)
def test_a_group_rides_through_a_read_only_server_with_short_bounded_waits(caplog) -> None:
    """While every new session is read-only the group's claim fails with
    25006 again and again: each time it reconnects after a wait drawn from
    RECONNECT_SECONDS, never a back-off that grows; once the server takes
    writes again the queued run is claimed."""
    caplog.set_level(logging.WARNING, logger="runqueue.worker")
    run_id = runqueue.submit(kind="k", priority=PriorityClass.ASYNC).run.id
    low, high = services.RECONNECT_SECONDS
    group = _group(1)
    _database_read_only(True)
    try:
        # Not woken from here: a wake-up claims for an idle slot in the
        # waking thread, whose connection here was opened before the server
        # turned read-only (a worker's listener's would be read-only too).
        # The group thread claims from its start, once its connection is
        # warmed (which fails here as well).
        slot = _started(group)
        wait_until(lambda: len(_waits(caplog)) >= 4, what="four failed claims", timeout=60)
        _database_read_only(False)
        back = time.monotonic()
        lease = slot.got(timeout=60)
        resumed = time.monotonic() - back
    finally:
        _database_read_only(False)
        _stop(group)
    assert lease is not None and lease.run_id == run_id
    waits = _waits(caplog)
    assert all(low <= w <= high for w in waits), waits
    # One wait at most, plus the claim itself (the machine may be loaded).
    assert resumed < high + 5, resumed
    assert Run.objects.get(id=run_id).failure is None
    assert "database error" not in caplog.text


@not_through_a_pooler(
    "it ends every other backend of the database, which there include the server connections"
    " lending this process's own threads their transactions, and one ended mid-transaction"
    " leaves the session's connection broken for the tests after it; through a pooler a"
    " worker's backends are ended by test_runworker's"
    " test_worker_survives_its_connections_being_terminated and the chaos soak"
)
def test_a_group_reconnects_after_its_backend_is_terminated(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="runqueue.worker")
    group = _group(1)
    slot = _started(group)
    try:
        wait_until(lambda: _terminate_others() >= 1, what="the group's connection")
        run_id = runqueue.submit(kind="k", priority=PriorityClass.ASYNC).run.id
        group.wake()
        lease = slot.got(timeout=60)
    finally:
        _stop(group)
    assert lease is not None and lease.run_id == run_id
    assert all(w <= services.RECONNECT_SECONDS[1] for w in _waits(caplog))
