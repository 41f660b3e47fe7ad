"""runworker as operators run it: real processes, real signals, real PostgreSQL."""

from __future__ import annotations

import os
import signal

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

import runqueue
from runqueue.models import (
    Checkpoint,
    EventLog,
    PriorityClass,
    Run,
    RunStatus,
    ToolInvocation,
    Worker,
)
from tests.handlers import ledger
from tests.helpers import event_types, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
SHORT_LEASE = [
    "--lease-seconds",
    "2",
    "--heartbeat-seconds",
    "0.5",
    "--sweep-seconds",
    "0.5",
    "--poll-seconds",
    "0.5",
]


def ledger_rows(run_id, what: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE run_id = %s AND what = %s ORDER BY id",
            [str(run_id), what],
        )
        return [row[0] for row in cursor.fetchall()]


def status_of(run_id) -> str:
    return Run.objects.values_list("status", flat=True).get(id=run_id)


def test_burst_drains_what_is_due_and_exits_0(start_worker) -> None:
    ids = [runqueue.submit(kind="test.record", payload={"i": i}).run.id for i in range(5)]
    failing = runqueue.submit(kind="test.fail", payload={"error": "permanent"}).run.id
    worker = start_worker("--burst", "--worker-id", "burst-1")
    assert worker.wait(120) == 0, worker.output()
    assert set(Run.objects.filter(id__in=ids).values_list("status", flat=True)) == {"succeeded"}
    failed = Run.objects.get(id=failing)
    assert (failed.status, failed.failure["classification"]) == ("failed", "permanent")
    # At INFO (the default) a run that succeeds logs nothing; one that fails says so.
    assert f"Finished run id={failing} kind=test.fail outcome=failed" in worker.output()
    assert "Claimed run id=" not in worker.output() and "outcome=succeeded" not in worker.output()
    assert Worker.objects.get(id="burst-1").stopped_at is not None


@pytest.mark.parametrize("idempotency", ["non_idempotent", "idempotent"])
def test_kill_9_mid_tool_call_is_recovered_by_another_worker(start_worker, idempotency) -> None:
    run_id = runqueue.submit(
        kind="test.tools", payload={"idempotency": idempotency, "block": True}
    ).run.id
    a = start_worker(*SHORT_LEASE, "--worker-id", "A", settings=FAST)
    wait_until(lambda: ledger_rows(run_id, "effect"), what="A to start the tool")
    a.send(signal.SIGKILL)
    a.wait()
    # Let a re-run of the idempotent tool through at once.
    ledger(run_id, "release")
    b = start_worker(*SHORT_LEASE, "--worker-id", "B", settings=FAST)
    wait_until(lambda: status_of(run_id) == "succeeded", what="B to finish the run")

    run = Run.objects.get(id=run_id)
    tool = ToolInvocation.objects.get(run_id=run_id, seq=0)
    effects = ledger_rows(run_id, "effect")
    if idempotency == "non_idempotent":
        # Never run twice; reported to the handler as an unknown outcome.
        assert len(effects) == 1
        assert tool.status == "uncertain"
        assert run.result["tool"] == "uncertain"
        assert "tool.uncertain" in event_types(run_id)
        assert Run.objects.uncertain().filter(id=run_id).exists()
    else:
        # Run again, with the same idempotency key for the external API.
        assert len(effects) == 2 and effects[0] == effects[1] == f"{run_id}:0"
        assert tool.status == "completed"
        assert run.result["tool"] == "completed"
    assert run.result["owner"].startswith("B/")
    assert run.attempts == 2
    assert "run.requeued" in event_types(run_id)
    b.send(signal.SIGTERM)
    assert b.wait() == 0


def test_frozen_worker_writes_nothing_but_run_fenced(start_worker) -> None:
    run_id = runqueue.submit(kind="test.block").run.id
    a = start_worker(*SHORT_LEASE, "--worker-id", "A", settings=FAST)
    wait_until(lambda: ledger_rows(run_id, "started"), what="A to start")
    a.send(signal.SIGSTOP)
    b = start_worker(*SHORT_LEASE, "--worker-id", "B", settings=FAST)
    wait_until(lambda: len(ledger_rows(run_id, "started")) == 2, what="B to reclaim")
    ledger(run_id, "release")
    wait_until(lambda: status_of(run_id) == "succeeded", what="B to finish")
    a.send(signal.SIGCONT)
    wait_until(
        lambda: EventLog.objects.filter(run_id=run_id, type="run.fenced").exists(),
        what="A to notice it was fenced",
    )
    wait_until(lambda: ledger_rows(run_id, "noticed_fenced"), what="A's handler to stop")

    run = Run.objects.get(id=run_id)
    assert run.result["finished_by"].startswith("B/")
    assert event_types(run_id, epoch=1) == ["run.claimed", "run.fenced"]
    assert ledger_rows(run_id, "finishing") == [ledger_rows(run_id, "started")[1]]
    for worker in (a, b):
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()


def _backend_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 1


def test_a_frozen_worker_loses_its_row_locks(start_worker) -> None:
    """A worker stopped (SIGSTOP) inside a fenced transaction, the run's row
    locked by it, cannot let go of anything itself: the idle limit its fence
    set for that transaction (set_config(..., true), half the lease) has the
    server end the transaction's backend, the lock goes with it, and another
    worker takes the run over and finishes it while the first is still
    stopped. Woken, the first writes nothing. Through a transaction pooler
    too (RUNQUEUE_TEST_POOLER): the limit is the transaction's, not a
    session's left on a pooled server connection."""
    run_id = runqueue.submit(kind="test.freeze_in_fence", payload={"freeze": "A"}).run.id
    a = start_worker(*SHORT_LEASE, "--worker-id", "A", settings=FAST)
    (pid,) = wait_until(lambda: ledger_rows(run_id, "inside_fence"), what="A inside its fence")
    a.send(signal.SIGSTOP)
    # Without the limit this backend would sit idle in its transaction, the
    # row locked, for as long as A is stopped: every sweep steps over it.
    wait_until(lambda: not _backend_alive(int(pid)), what="A's backend to be ended")
    b = start_worker(*SHORT_LEASE, "--worker-id", "B", settings=FAST)
    wait_until(lambda: status_of(run_id) == "succeeded", what="B to take over and finish")
    assert a.proc.poll() is None  # still stopped: nothing of A's let the lock go

    ledger(run_id, "thaw")
    a.send(signal.SIGCONT)
    wait_until(lambda: ledger_rows(run_id, "thawed"), what="A to wake inside its fence")
    finished = wait_until(
        lambda: [line for line in a.output().splitlines() if f"Finished run id={run_id}" in line],
        what="A to finish its attempt",
    )
    # Its transaction is gone: the database is lost to it, never the run's
    # failure; it decides nothing and leaves the lease to expiry.
    assert "outcome=error" in finished[0], a.output()
    assert "failed permanently" not in a.output()

    run = Run.objects.get(id=run_id)
    assert run.result["finished_by"].startswith("B/")
    assert ledger_rows(run_id, "finishing") == [run.result["finished_by"]]
    states = Checkpoint.objects.filter(run_id=run_id).values_list("state", flat=True)
    assert list(states) == [{"by": run.result["finished_by"]}]  # A's rolled back with it
    assert EventLog.objects.filter(run_id=run_id, type="run.succeeded").count() == 1
    for worker in (a, b):
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()


def test_sigterm_lets_the_run_finish_within_grace(start_worker) -> None:
    run_id = runqueue.submit(kind="test.block").run.id
    a = start_worker("--grace-seconds", "60", "--worker-id", "A")
    wait_until(lambda: ledger_rows(run_id, "started"), what="A to start")
    a.send(signal.SIGTERM)
    ledger(run_id, "release")
    assert a.wait() == 0, a.output()
    assert status_of(run_id) == "succeeded"
    assert Worker.objects.get(id="A").stopped_at is not None


def test_sigterm_gives_back_what_the_grace_period_did_not_cover(start_worker) -> None:
    run_id = runqueue.submit(kind="test.block").run.id
    a = start_worker("--grace-seconds", "0.5", "--worker-id", "A")
    wait_until(lambda: ledger_rows(run_id, "started"), what="A to start")
    a.send(signal.SIGTERM)
    assert a.wait() == 0, a.output()
    run = Run.objects.get(id=run_id)
    # Queued at once (due from the release on), the attempt handed back, the
    # epoch moved past A's.
    assert (run.status, run.attempts, run.lease_epoch) == ("queued", 0, 2)
    assert run.started_at <= run.scheduled_for <= timezone.now()
    requeued = EventLog.objects.get(run_id=run_id, type="run.requeued")
    assert requeued.data["reason"] == "shutdown"
    assert Worker.objects.get(id="A").stopped_at is not None


def test_sigterm_tells_handlers_to_stop_before_the_grace_ends(start_worker) -> None:
    """Halfway through the grace, running handlers are told to stop: a sync
    one waiting on ctx.cancelled and an async one at its await return, and
    their runs are given back at once; one that ignores it is logged and
    given back when the grace ends."""
    sync_run = runqueue.submit(kind="test.cooperative").run.id
    async_run = runqueue.submit(kind="test.async_cooperative").run.id
    stubborn = runqueue.submit(kind="test.block").run.id
    w = start_worker(
        "--slots", "interactive=2", "--slots", "interactive=1:loop",
        "--grace-seconds", "6", "--worker-id", "W",
    )  # fmt: skip
    for run_id in (sync_run, async_run, stubborn):
        wait_until(lambda r=run_id: ledger_rows(r, "started"), what="every run to start")
    w.send(signal.SIGTERM)
    assert w.wait() == 0, w.output()
    assert ledger_rows(sync_run, "cancelled") == ["stopping"]
    assert ledger_rows(async_run, "cancelled") == ["stopping"]
    for run_id in (sync_run, async_run, stubborn):
        run = Run.objects.get(id=run_id)
        assert (run.status, run.attempts) == ("queued", 0)  # given back, attempt returned
        assert EventLog.objects.get(run_id=run_id, type="run.requeued").data["reason"] == (
            "shutdown"
        )
    ignored = [line for line in w.output().splitlines() if "ignored the stop" in line]
    assert len(ignored) == 1 and str(stubborn) in ignored[0], w.output()


def test_interactive_is_claimed_before_a_queued_async_backlog(start_worker) -> None:
    """Reserved capacity: every async slot busy, thousands of async runs queued."""
    blocker = runqueue.submit(kind="test.block", priority=PriorityClass.ASYNC).run.id
    for i in range(2000):
        runqueue.submit(kind="test.record", payload={"i": i}, priority=PriorityClass.ASYNC)
    w = start_worker("--slots", "async=1", "--slots", "interactive=1", "--worker-id", "W")
    wait_until(lambda: ledger_rows(blocker, "started"), what="the async slot to be busy")
    interactive = runqueue.submit(kind="test.record", priority=PriorityClass.INTERACTIVE).run.id
    wait_until(lambda: status_of(interactive) == "succeeded", what="the interactive run")

    claims = list(
        EventLog.objects.filter(type="run.claimed").order_by("id").values_list("run_id", flat=True)
    )
    assert claims == [blocker, interactive]
    assert Run.objects.get(id=interactive).result["owner"] == "W/interactive"
    assert Run.objects.filter(priority=PriorityClass.ASYNC, status="queued").count() == 2000
    ledger(blocker, "release")
    w.send(signal.SIGTERM)
    assert w.wait() == 0


def _listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database()"
            " AND query ILIKE 'LISTEN %%' AND state = 'idle'"
        )
        return cursor.fetchone()[0] > 0


def test_notify_wakes_an_idle_worker_long_before_its_poll(start_worker) -> None:
    w = start_worker("--poll-seconds", "60", "--slots", "interactive=1", "--worker-id", "N")
    wait_until(_listening, what="the worker to LISTEN")
    wait_until(lambda: Worker.objects.filter(id="N").exists(), what="the worker to register")
    run_id = runqueue.submit(kind="test.record").run.id
    wait_until(lambda: status_of(run_id) == "succeeded", timeout=20, what="the run to finish")
    claimed = EventLog.objects.get(run_id=run_id, type="run.claimed")
    assert claimed.data["wait_ms"] < 10_000  # a 60 s poll could not have found it
    w.send(signal.SIGTERM)
    assert w.wait() == 0


def test_ask_user_round_trip(start_worker) -> None:
    w = start_worker("--poll-seconds", "0.5", "--worker-id", "Q")
    run_id = runqueue.submit(kind="test.ask", session_id="chat-9").run.id
    wait_until(lambda: status_of(run_id) == RunStatus.WAITING_FOR_USER, what="the question")
    sub = runqueue.submit(kind="test.ask", session_id="chat-9", payload={"day": "Tuesday"})
    assert (sub.outcome, sub.run.id) == ("input_delivered", run_id)
    wait_until(lambda: status_of(run_id) == "succeeded", what="the answer")
    run = Run.objects.get(id=run_id)
    assert run.result == {"answer": {"day": "Tuesday"}, "state": {"asked": True}}
    assert Run.objects.filter(session_id="chat-9").count() == 1
    w.send(signal.SIGTERM)
    assert w.wait() == 0


def _reconnecting(predicate):
    """``predicate()``, or False after closing a connection the server dropped."""
    try:
        return predicate()
    except OperationalError:
        connection.close()
        return False


def test_worker_survives_its_connections_being_terminated(start_worker) -> None:
    w = start_worker(*SHORT_LEASE, "--worker-id", "T", settings=FAST)
    first = runqueue.submit(kind="test.record").run.id
    wait_until(lambda: status_of(first) == "succeeded", what="the first run")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        assert cursor.fetchone()[0] >= 1
    # Behind a transaction pooler the test's own client may be handed one of
    # the server connections just terminated: the pooler closes that client,
    # as it would an application's, and the test opens a new one.
    wait_until(lambda: _reconnecting(_listening), what="the worker to LISTEN again")
    second = wait_until(
        lambda: _reconnecting(
            lambda: runqueue.submit(kind="test.record", idempotency_key="after-terminate").run.id
        ),
        what="a submit after the reconnect",
    )
    wait_until(
        lambda: _reconnecting(lambda: status_of(second) == "succeeded"),
        what="a run after the reconnect",
    )
    assert w.proc.poll() is None
    w.send(signal.SIGTERM)
    assert w.wait() == 0, w.output()


def test_a_second_signal_exits_at_once(start_worker) -> None:
    run_id = runqueue.submit(kind="test.block").run.id
    a = start_worker("--grace-seconds", "600", "--worker-id", "A")
    wait_until(lambda: ledger_rows(run_id, "started"), what="A to start")
    a.send(signal.SIGTERM)
    wait_until(lambda: "Signal 15: stopping" in a.output(), what="the first signal to land")
    a.send(signal.SIGINT)
    # Well inside the 600 s grace period: it did not wait for the run.
    assert a.wait(30) == 1, a.output()
    assert status_of(run_id) == "running"  # its lease expires; the sweeper requeues it


def test_processes_share_the_slots_and_stop_together(start_worker) -> None:
    """``--processes 2``: two workers of their own, one slot each of
    ``interactive=2``, both running at once; one SIGTERM stops both."""
    w = start_worker("--processes", "2", "--slots", "interactive=2", "--worker-id", "M")
    runs = [runqueue.submit(kind="test.block").run.id for _ in range(2)]
    wait_until(
        lambda: all(ledger_rows(run_id, "started") for run_id in runs), what="both runs to start"
    )
    owners = {ledger_rows(run_id, "started")[0] for run_id in runs}
    assert {owner.split("/")[0] for owner in owners} == {"M-0", "M-1"}, owners
    for run_id in runs:
        ledger(run_id, "release")
    wait_until(
        lambda: all(status_of(run_id) == "succeeded" for run_id in runs), what="both to finish"
    )
    w.send(signal.SIGTERM)
    assert w.wait() == 0, w.output()
    stopped = Worker.objects.filter(id__in=["M-0", "M-1"], stopped_at__isnull=False)
    assert stopped.count() == 2


def test_a_process_exiting_unasked_stops_the_others(start_worker) -> None:
    w = start_worker("--processes", "2", "--slots", "interactive=2", "--worker-id", "K")
    rows = Worker.objects.filter(id__in=["K-0", "K-1"])
    wait_until(lambda: rows.count() == 2, what="both processes to register")
    first, second = (row.pid for row in rows.order_by("id"))
    os.kill(first, signal.SIGKILL)
    assert w.wait() == 1, w.output()
    assert "exited with -9: stopping the others" in w.output()

    def gone() -> bool:
        try:
            os.kill(second, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, what="the other process to stop")
