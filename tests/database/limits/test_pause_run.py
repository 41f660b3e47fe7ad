"""Pausing one run or a run tree (runqueue.pause_run; docs/decisions.md,
"Pausing one run"): a paused run is not claimed, a running one is given
back at its handler's next step with nothing recorded lost and its attempt
returned, its start deadline is frozen, and a resume puts it back; pause
raced against a claim and against a finish."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection

import runqueue
from runqueue import leases, runtime, testing
from runqueue.errors import InvalidArgument, InvalidTransition, RunNotFound
from runqueue.models import PriorityClass, Run, RunEvent, ToolInvocation
from runqueue.sql import execute
from tests.handlers import ledger
from tests.helpers import Worker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_ledger")]


def ledger_whats(run_id) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT what FROM runqueue_test_ledger WHERE run_id = %s ORDER BY id", [str(run_id)]
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_paused_run_is_not_claimed_until_resumed() -> None:
    run_id = runqueue.submit(kind="test.echo").run.id
    assert runqueue.pause_run(run_id, actor="ops", reason="look first") == [run_id]
    assert runqueue.pause_run(run_id, actor="ops") == []  # already paused: nothing more
    assert leases.claim_one("w", [PriorityClass.INTERACTIVE]) is None
    assert runqueue.resume_run(run_id, actor="ops") == [run_id]
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert lease is not None and lease.run_id == run_id
    types = list(RunEvent.objects.filter(run_id=run_id).values_list("type", flat=True))
    assert types == ["run.paused", "run.unpaused"]
    assert RunEvent.objects.get(run_id=run_id, type="run.paused").data["reason"] == "look first"


def test_a_running_run_is_given_back_at_its_next_step_and_resumes_where_it_was() -> None:
    run_id = runqueue.submit(kind="test.pausable").run.id
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert lease is not None
    handler = Worker(lambda: testing.execute(lease), name="handler")
    handler.start()
    wait_until(lambda: "step1" in ledger_whats(run_id), what="the first step")
    runqueue.pause_run(run_id, actor="ops")
    # The worker learns it from its NOTIFY or, as here, its heartbeat. A
    # heartbeat steps over a lease whose handler is writing (its write lock
    # held: the first step's record may still be committing) and the next
    # one renews it, as the worker's heartbeat thread does round after round.
    wait_until(
        lambda: leases.heartbeat_many([lease]) == [] and lease.paused,
        what="a heartbeat to find the run paused",
    )
    ledger(run_id, "release")
    assert handler.outcome() == "given_back"
    run = Run.objects.get(id=run_id)
    assert (run.status, run.attempts, run.paused_at is not None) == ("queued", 0, True)
    assert ledger_whats(run_id) == ["step1", "release"]  # the second step never ran
    assert leases.claim_one("w", [PriorityClass.INTERACTIVE]) is None
    runqueue.resume_run(run_id, actor="ops")
    again = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert again is not None and again.run_id == run_id
    assert testing.execute(again) == "succeeded"
    run.refresh_from_db()
    assert run.result == {"steps": [1, 2]}
    # The first step was replayed from its record, not run again.
    assert ledger_whats(run_id) == ["step1", "release", "step2"]
    assert ToolInvocation.objects.filter(run_id=run_id).count() == 2


def test_the_start_deadline_is_frozen_while_paused() -> None:
    run_id = runqueue.submit(kind="test.echo", start_within=60).run.id
    runqueue.pause_run(run_id, actor="ops")
    # Ten minutes paused, as the database clock would see it: the deadline
    # has passed, and the deadline service leaves the run alone.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET paused_at = paused_at - interval '10 minutes',"
            " start_by = start_by - interval '10 minutes' WHERE id = %s",
            [run_id],
        )
    before = Run.objects.get(id=run_id).start_by
    with connection.cursor() as cursor:
        params = {"limit": 100, "failure": "{}", "channel": "runqueue"}
        assert execute(cursor, "expire_unstarted", params).fetchall() == []
    assert Run.objects.get(id=run_id).status == "queued"
    runqueue.resume_run(run_id, actor="ops")
    after = Run.objects.get(id=run_id).start_by
    assert after - before >= dt.timedelta(minutes=10)
    assert leases.claim_one("w", [PriorityClass.INTERACTIVE]).run_id == run_id


def test_a_tree_pauses_and_resumes_whole() -> None:
    runqueue.submit(kind="test.fanout")
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    ctx = runtime.build_context(lease)
    kids = [ctx.spawn("test.echo", {"i": i}, priority=PriorityClass.ASYNC) for i in range(3)]
    grandchild_parent = leases.claim_one("w", [PriorityClass.ASYNC])
    assert grandchild_parent is not None
    root = lease.run_id
    assert set(runqueue.pause_run(root, actor="ops", tree=True)) == {root, *kids}
    assert leases.claim_one("w", [PriorityClass.ASYNC]) is None
    tree_from = {e.data["tree_from"] for e in RunEvent.objects.filter(type="run.paused")}
    assert tree_from == {str(root)}
    # Only the one run: its children stay paused.
    assert runqueue.resume_run(root, actor="ops") == [root]
    assert leases.claim_one("w", [PriorityClass.ASYNC]) is None
    assert set(runqueue.resume_run(root, actor="ops", tree=True)) == set(kids)
    assert leases.claim_one("w", [PriorityClass.ASYNC]) is not None


def test_refusals() -> None:
    with pytest.raises(InvalidArgument):
        runqueue.pause_run("not-a-uuid", actor="ops")
    with pytest.raises(RunNotFound):
        runqueue.pause_run("00000000-0000-0000-0000-000000000001", actor="ops")
    run_id = runqueue.submit(kind="test.echo").run.id
    runqueue.cancel(run_id, reason="done", actor="ops")
    with pytest.raises(InvalidTransition):
        runqueue.pause_run(run_id, actor="ops")
    assert runqueue.resume_run(run_id, actor="ops") == []


def _claim_round() -> str:
    run_id = runqueue.submit(kind="test.echo").run.id
    go = threading.Barrier(2)

    def claim():
        go.wait(10)
        return leases.claim_one("w", [PriorityClass.INTERACTIVE])

    def pause():
        go.wait(10)
        return runqueue.pause_run(run_id, actor="ops")

    claimer, pauser = Worker(claim, name="claim"), Worker(pause, name="pause")
    claimer.start()
    pauser.start()
    lease, paused = claimer.outcome(), pauser.outcome()
    assert paused == [run_id]
    run = Run.objects.get(id=run_id)
    if lease is None:
        assert run.status == "queued" and run.claimed_at is None
        runqueue.cancel(run_id, reason="next round", actor="t")
        return "pause first"
    paused_event = RunEvent.objects.get(run_id=run_id, type="run.paused").id
    assert run.status == "running" and run.claim_event_id < paused_event
    assert leases.heartbeat_many([lease]) == [] and lease.paused
    assert testing.execute(lease) == "succeeded"  # test.echo takes no step
    return "claim first"


def test_pause_racing_claim() -> None:
    """A claim and a pause at once: either the claim wins (the run runs,
    paused after its claim, and its heartbeat tells the lease) or the pause
    does (nothing is claimed); never a claim of a run paused before it."""
    for _ in range(30):
        _claim_round()  # each round asserts what its order left


def _finish_round() -> str:
    run_id = runqueue.submit(kind="test.echo").run.id
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    go = threading.Barrier(2)

    def finish():
        go.wait(10)
        return testing.succeed(lease, {"ok": True})

    def pause():
        go.wait(10)
        try:
            return runqueue.pause_run(run_id, actor="ops")
        except InvalidTransition:
            return "refused"

    finisher, pauser = Worker(finish, name="finish"), Worker(pause, name="pause")
    finisher.start()
    pauser.start()
    assert finisher.outcome() is True
    result = pauser.outcome()
    run = Run.objects.get(id=run_id)
    assert run.status == "succeeded"
    if result == "refused":
        assert run.paused_at is None
        return "finish first"
    assert result == [run_id] and run.paused_at is not None
    return "pause first"


def test_pause_racing_finish() -> None:
    """A finish and a pause at once: the pause is refused (the run ended
    first) or lands first and the run still finishes; no error else."""
    for _ in range(30):
        _finish_round()  # each round asserts what its order left
