"""runqueue sets nothing for a session: behind a transaction pooler a server
connection serves other clients next, and a session's setting (a worker's
idle_in_transaction_session_timeout) would end their transactions. Every
setting of runqueue's is local to its transaction (``SET LOCAL``,
``set_config(..., true)``): compared here on the same physical connection
before and after a worker's and a submit's statements. And the LISTEN
connections open the database RUNQUEUE["LISTEN_DATABASE"] names."""

from __future__ import annotations

import copy
import logging
import threading

import pytest
from django.core.checks import run_checks
from django.db import connection, connections

import runqueue
from runqueue import db, leases
from runqueue.history import partitions
from runqueue.leases.fence import idle_timeout
from runqueue.models import PriorityClass, Run, RunStatus
from runqueue.observability import queue_metrics
from runqueue.sql import queries
from runqueue.submission.submit import SubmitRequest
from runqueue.worker.listener import Listener
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.helpers import Worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: The settings runqueue changes inside its transactions.
WATCHED = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")

_SESSION = """
SELECT pg_backend_pid(),
       array_agg(name || '=' || setting ORDER BY name) FILTER (WHERE source = 'session'),
       array_agg(setting ORDER BY name) FILTER (WHERE name = ANY(%s))
  FROM pg_settings
"""


def _session() -> tuple[int, list[str] | None, list[str]]:
    """This connection's backend, its settings set for the session, and the
    watched settings' values: read in a transaction of its own."""
    with connection.cursor() as cursor:
        cursor.execute(_SESSION, [list(WATCHED)])
        return cursor.fetchone()


@runqueue.handler("test.session_settings")
def report_settings(ctx: runqueue.RunContext) -> dict:
    """After the worker's claim and a fenced transaction of its own, what
    the slot's connection carries outside any transaction."""
    ctx.checkpoint({"step": 1})
    pid, session, watched = _session()
    return {"session": session, "watched": watched}


def test_a_workers_and_a_submits_statements_leave_no_setting_on_the_connection(hooks) -> None:
    inside: list[str] = []

    def statements() -> tuple[tuple, tuple]:
        before = _session()
        runqueue.submit(kind="k", priority=PriorityClass.ASYNC, idempotency_key="key-1")
        runqueue.submit(kind="k", priority=PriorityClass.ASYNC, idempotency_key="key-1")
        runqueue.submit_many(
            [
                SubmitRequest(kind="k", priority=PriorityClass.ASYNC, idempotency_key=f"m{i}")
                for i in range(3)
            ]
        )
        (lease, *others) = leases.claim("w", [PriorityClass.ASYNC], limit=4, lease_seconds=30)
        assert leases.heartbeat(lease) and leases.heartbeat_many(others) == []
        assert leases.checkpoint(lease, {"step": 1})
        assert leases.record_tool_started(
            lease, seq=0, tool="t", idempotency="idempotent", arguments={}
        )
        assert leases.append_event(lease, "note", {"n": 1})
        assert leases.give_up(others[0], ValueError("flaky"))
        assert leases.wait_for_user(others[1], {"ask": "?"})
        assert leases.release(others[2], "stopping")
        from runqueue.leases.outcomes import Succeeded

        assert leases.finish_and_claim(
            [(lease, Succeeded.of({}))], leases.claim_spec("w", [PriorityClass.ASYNC], limit=1)
        )[0] == [True]
        leases.sweep()
        queue_metrics.read()
        partitions.ensure()
        return before, _session()

    def record_inside(lease: leases.Lease, action: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
            inside.append(cursor.fetchone()[0])

    hooks.inside_fence = record_inside
    thread = Worker(statements)
    thread.start()
    before, after = thread.outcome()
    assert before[0] == after[0]  # the same server connection throughout
    assert after[1:] == before[1:]
    # Nothing of runqueue's set for the session (Django sets the time zone).
    assert not [s for s in after[1] or [] if s.split("=")[0] in WATCHED], after[1]
    # Inside each fenced transaction the limit held (15 s: half the lease).
    assert inside and set(inside) == {"15s"}


def test_a_worker_pools_slot_connection_carries_no_setting_of_runqueues() -> None:
    """The old per-session idle timeout showed here on every worker
    connection; the limit now lives inside each worker transaction."""
    run_id = runqueue.submit(kind="test.session_settings", priority=PriorityClass.ASYNC).run.id
    fresh = db.connect()
    (defaults,) = fresh.execute(
        "SELECT array_agg(setting ORDER BY name) FROM pg_settings WHERE name = ANY(%s)",
        [list(WATCHED)],
    ).fetchone()
    fresh.close()
    pool = Pool(PoolConfig(slots=(SlotSpec.parse("async=1"),), burst=True, worker_id="sess"))
    assert pool.run() == 0
    run = Run.objects.get(id=run_id)
    assert run.status == RunStatus.SUCCEEDED, run.failure
    session = run.result["session"] or []
    assert not [s for s in session if s.split("=")[0] in WATCHED], session
    assert run.result["watched"] == defaults


def test_no_statement_sets_anything_for_a_session() -> None:
    for name, text in queries().items():
        lowered = " ".join(text.lower().split())
        assert "set_config(" not in lowered or lowered.count("set_config(") == lowered.count(
            ", true)"
        ), name
        assert "set session" not in lowered and not lowered.startswith("set "), name
    assert idle_timeout(leases.Lease(run=Run(), owner="w", lease_seconds=0.2)) == "500ms"


def test_listeners_connect_to_the_listen_database(settings) -> None:
    """RUNQUEUE["LISTEN_DATABASE"] names the DATABASES alias LISTEN opens;
    an alias Django does not know is a check error."""
    direct = copy.deepcopy(connections.settings["default"])  # the test database's
    direct["OPTIONS"] = direct["OPTIONS"] | {"application_name": "rq-listen"}
    connections.settings["direct"] = direct
    settings.RUNQUEUE = {"LISTEN_DATABASE": "direct"}
    assert db.listen_alias() == "direct"
    stopping = threading.Event()
    listener = Listener("runqueue_listen_db", lambda payload: None, stopping)
    listener.start()
    try:
        assert not [m for m in run_checks() if m.id == "runqueue.E004"]
        assert listener.wait_listening(30)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'rq-listen'"
                " AND query LIKE 'LISTEN%%'"
            )
            assert cursor.fetchone()[0] == 1
    finally:
        stopping.set()
        listener.join(10)
        del connections.settings["direct"]
    settings.RUNQUEUE = {"LISTEN_DATABASE": "nowhere"}
    errors = [m for m in run_checks() if m.id == "runqueue.E004"]
    assert len(errors) == 1 and "'nowhere'" in errors[0].msg
    settings.RUNQUEUE = {}
    assert db.listen_alias() == "default"


def test_a_listen_that_hears_nothing_sent_through_default_says_so(
    settings, monkeypatch, caplog
) -> None:
    """The listener NOTIFYs itself through "default" after each connect: a
    LISTEN that never hears it (here: on another database, as a LISTEN
    through a transaction pooler hears nothing) is logged, and the worker
    polls. On the right database the probe arrives and nothing is logged."""
    from runqueue.worker import listener as listener_module

    monkeypatch.setattr(listener_module, "PROBE_SECONDS", 1.0)
    caplog.set_level(logging.WARNING, logger="runqueue.worker")
    elsewhere = copy.deepcopy(connections.settings["default"])
    elsewhere["NAME"] = "postgres"  # NOTIFY is per database
    connections.settings["elsewhere"] = elsewhere
    try:
        for alias, hears in (("default", True), ("elsewhere", False)):
            settings.RUNQUEUE = {"LISTEN_DATABASE": alias}
            woken: list[str] = []
            stopping = threading.Event()
            listener = Listener("runqueue_probe_test", woken.append, stopping)
            listener.start()
            try:
                assert listener.wait_listening(30)
                wait_until(
                    lambda lst=listener: lst.heard_probe is not None, what="the probe's verdict"
                )
            finally:
                stopping.set()
                listener.join(10)
            assert listener.heard_probe is hears
            assert all(not p.startswith("probe:") for p in woken), woken
            warned = [r for r in caplog.records if "heard no NOTIFY" in r.getMessage()]
            assert bool(warned) is not hears and (
                not warned or "'elsewhere'" in warned[0].getMessage()
            )
    finally:
        del connections.settings["elsewhere"]
