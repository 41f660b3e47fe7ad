"""runqueue.fork: a finished run forked from one of its steps replays the
steps before it from copied records (never running them again) and runs
the rest; lineage both ways; refused with a clear error past a step whose
outcome nobody knows, for a step out of range, a live run, bad input."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

import runqueue
from runqueue import leases, testing
from runqueue.errors import SPEND_CAP
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation, TreeSpend
from tests.admin_support import uncertain
from tests.handlers import ledger
from tests.helpers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_ledger")]


def _ledger_steps(run_id: object) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE run_id = %s AND what = 'step'"
            " ORDER BY id",
            [str(run_id)],
        )
        return [int(row[0]) for row in cursor.fetchall()]


def _run_to_end(run_id: uuid.UUID) -> Run:
    """Claim and run ``run_id`` in this process until it is terminal."""
    for _ in range(10):
        run = Run.objects.get(id=run_id)
        if run.is_terminal:
            return run
        lease = leases.claim_one("w-test", lease_seconds=30)
        assert lease is not None and lease.run_id == run_id, lease
        testing.execute(lease)
    raise AssertionError(f"run {run_id} did not end")


def _failed_after(steps: int, fail_after: int) -> Run:
    run = runqueue.submit(
        kind="test.steps", payload={"steps": steps, "fail_after": fail_after}, session_id="s-1"
    ).run
    run = _run_to_end(run.id)
    assert run.status == RunStatus.FAILED
    return run


def test_a_fork_of_a_failed_run_replays_its_first_steps_and_runs_the_rest_in_a_worker(
    start_worker,
) -> None:
    """The original ran steps 0-2 and failed; the fork keeps steps 0 and 1
    (not run again: the ledger has them once, from the original), runs step 2
    and the rest with the edited payload, in a real runworker process."""
    original = _failed_after(steps=5, fail_after=2)
    assert _ledger_steps(original.id) == [0, 1, 2]
    fork = runqueue.fork(
        original.id,
        from_step=2,
        payload={"steps": 5, "fail_after": None},
        actor="staff:ann",
        reason="the order service is fixed",
    )
    assert fork.status == RunStatus.QUEUED
    assert fork.forked_from_id == original.id
    assert fork.session_id is None  # holds no session slot
    assert (fork.kind, fork.tenant, fork.principal, fork.priority, fork.concurrency_key) == (
        original.kind,
        original.tenant,
        original.principal,
        original.priority,
        original.concurrency_key,
    )
    copied = list(fork.tool_invocations.order_by("seq").values_list("seq", "tool", "status"))
    assert copied == [(0, "step0", "completed"), (1, "step1", "completed")]

    worker = start_worker("--slots", "interactive=1", "--burst")
    assert worker.wait(60) == 0, worker.output()
    fork.refresh_from_db()
    assert fork.status == RunStatus.SUCCEEDED, fork.failure
    assert fork.result == {"values": [0, 1, 2, 3, 4]}
    assert _ledger_steps(fork.id) == [2, 3, 4]  # steps 0 and 1 replayed, not run
    assert _ledger_steps(original.id) == [0, 1, 2]
    # The replayed steps kept the original's idempotency keys' results.
    assert fork.tool_invocations.get(seq=0).result["key"] == f"{original.id}:0"
    assert fork.tool_invocations.get(seq=2).result["key"] == f"{fork.id}:2"
    # Lineage both ways, and run.forked in both logs.
    assert list(original.forks.values_list("id", flat=True)) == [fork.id]
    mine = EventLog.objects.get(run_id=fork.id, type="run.forked").data
    theirs = EventLog.objects.get(run_id=original.id, type="run.forked").data
    assert mine == {
        "forked_from": str(original.id),
        "from_step": 2,
        "actor": "staff:ann",
        "reason": "the order service is fixed",
        "payload_edited": True,
    }
    assert theirs == {
        "fork": str(fork.id),
        "from_step": 2,
        "actor": "staff:ann",
        "reason": "the order service is fixed",
    }


def test_fork_from_failure_keeps_every_recorded_step() -> None:
    original = _failed_after(steps=4, fail_after=1)
    fork = leases.fork_from_failure(original.id, actor="ops", reason="retry from the failure")
    assert fork.tool_invocations.count() == 2
    assert fork.payload == original.payload
    _run_to_end(fork.id)
    fork.refresh_from_db()
    # The same payload: it replays steps 0-1 and fails after step 1 again.
    assert fork.status == RunStatus.FAILED
    assert _ledger_steps(fork.id) == []
    assert fork.failure["message"] == "failed after step 1"


def test_fork_from_failure_of_a_failed_tool_call_runs_that_call_again() -> None:
    """Issue 47: the fork kept the failed call's record, replayed the
    failure and was dead-lettered with the same error. It keeps the steps
    before the failed call, which runs again (the provider is back)."""
    original = runqueue.submit(kind="test.steps", payload={"steps": 4, "tool_fails_at": 2}).run
    original = _run_to_end(original.id)
    assert original.status == RunStatus.FAILED
    assert original.failure["message"].startswith("step 2 failed")
    fork = leases.fork_from_failure(original.id, actor="ops", reason="the provider is back")
    assert list(fork.tool_invocations.values_list("seq", flat=True)) == [0, 1]
    ledger("provider", "up")
    try:
        assert _run_to_end(fork.id).status == RunStatus.SUCCEEDED
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runqueue_test_ledger WHERE run_id = 'provider'")
    assert _ledger_steps(fork.id) == [2, 3]  # 0 and 1 replayed, 2 run again


def test_a_fork_from_step_zero_runs_everything_again() -> None:
    original = _failed_after(steps=2, fail_after=1)
    fork = runqueue.fork(
        original.id, from_step=0, payload={"steps": 2}, actor="ops", reason="from the top"
    )
    assert not fork.tool_invocations.exists()
    assert _run_to_end(fork.id).status == RunStatus.SUCCEEDED
    assert _ledger_steps(fork.id) == [0, 1]


def test_a_copied_spawn_shares_its_child() -> None:
    """A copied spawn names the same child (finished): the fork's handler
    gets that child's id back and spawns no second one."""
    original = runqueue.submit(
        kind="test.steps", payload={"steps": 3, "spawn_at": 1, "fail_after": 2}
    ).run
    original = _run_to_end(original.id)
    child_id = uuid.UUID(original.tool_invocations.get(seq=1).result["run_id"])
    _run_to_end(child_id)
    fork = runqueue.fork(
        original.id, from_step=2, payload={"steps": 3, "spawn_at": 1}, actor="a", reason="r"
    )
    assert _run_to_end(fork.id).status == RunStatus.SUCCEEDED
    fork.refresh_from_db()
    assert fork.result["values"][1] == str(child_id)
    assert not Run.objects.filter(parent_id=fork.id).exists()  # no second child


def test_refused_past_a_spawn_whose_child_is_still_live() -> None:
    original = runqueue.submit(
        kind="test.steps", payload={"steps": 3, "spawn_at": 1, "fail_after": 2}
    ).run
    original = _run_to_end(original.id)  # the child stays queued
    with pytest.raises(runqueue.ForkRefused, match=r"step #1 spawned run .* still queued"):
        runqueue.fork(original.id, from_step=2, actor="a", reason="r")
    fork = runqueue.fork(original.id, from_step=1, actor="a", reason="r")  # before it: allowed
    assert fork.tool_invocations.count() == 1


def test_refused_past_an_unresolved_uncertain_tool_and_allowed_once_resolved() -> None:
    run, tool = uncertain(payload={"then_fail": True})
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    before = Run.objects.count()
    with pytest.raises(runqueue.ForkRefused) as refused:
        runqueue.fork(run.id, from_step=1, actor="a", reason="r")
    assert refused.value.step == 0
    assert str(refused.value) == (
        f"cannot fork run {run.id} past step #0: step #0 (charge_card) ended uncertain and "
        "nobody resolved it: resolve it (did it happen?) or fork from step 0 or before"
    )
    with pytest.raises(runqueue.ForkRefused):
        leases.fork_from_failure(run.id, actor="a", reason="r")
    assert Run.objects.count() == before  # nothing written
    assert runqueue.fork(run.id, from_step=0, actor="a", reason="r").forked_from_id == run.id
    leases.resolve_uncertain(tool.id, happened=False, note="no charge in the PSP", actor="a")
    fork = runqueue.fork(run.id, from_step=1, actor="a", reason="r")
    assert fork.tool_invocations.get().resolution["happened"] is False


def test_refused_for_a_live_run_a_step_out_of_range_and_bad_input() -> None:
    done = _failed_after(steps=3, fail_after=1)
    live = runqueue.submit(kind="test.steps", payload={"steps": 1}).run
    with pytest.raises(runqueue.InvalidTransition, match="cannot fork run .*: it is queued"):
        runqueue.fork(live.id, from_step=0, actor="a", reason="r")
    with pytest.raises(
        runqueue.InvalidArgument,
        match=rf"fork: from_step must be at most 2 \(the steps run {done.id} recorded\), got 3",
    ):
        runqueue.fork(done.id, from_step=3, actor="a", reason="r")
    for bad in (-1, 1.5, True, "1", None):
        with pytest.raises(runqueue.InvalidArgument, match="from_step must be an integer >= 0"):
            runqueue.fork(done.id, from_step=bad, actor="a", reason="r")  # type: ignore[arg-type]
    with pytest.raises(runqueue.InvalidArgument, match="fork: payload must be JSON"):
        runqueue.fork(done.id, from_step=0, payload={"x": object()}, actor="a", reason="r")
    with pytest.raises(runqueue.InvalidArgument, match="fork: run_id must be a UUID"):
        runqueue.fork("nope", from_step=0, actor="a", reason="r")
    with pytest.raises(runqueue.InvalidArgument, match="fork: reason"):
        runqueue.fork(done.id, from_step=0, actor="a", reason="\x00")
    with pytest.raises(runqueue.RunNotFound):
        runqueue.fork(uuid.uuid4(), from_step=0, actor="a", reason="r")
    with pytest.raises(runqueue.InvalidTransition, match="fork from failure"):
        leases.fork_from_failure(live.id, actor="a", reason="r")
    assert not Run.objects.filter(forked_from__isnull=False).exists()


def test_a_session_runs_fork_never_takes_the_session(start_worker) -> None:
    """The session has a new active run: the fork of its failed turn still
    goes (it holds no session slot) and the session's run is untouched."""
    original = _failed_after(steps=2, fail_after=0)
    active = runqueue.submit(kind="test.echo", session_id="s-1").run
    fork = runqueue.fork(original.id, from_step=1, payload={"steps": 2}, actor="a", reason="r")
    assert fork.session_id is None
    assert Run.objects.get(id=active.id).status == RunStatus.QUEUED
    worker = start_worker("--slots", "interactive=2", "--burst")
    assert worker.wait(60) == 0, worker.output()
    wait_until(lambda: Run.objects.get(id=fork.id).status == RunStatus.SUCCEEDED)


def test_a_fork_carries_its_trees_spend_cap_with_nothing_spent() -> None:
    original = runqueue.submit(kind="test.steps", payload={"steps": 1}, spend_cap=2).run
    assert _run_to_end(original.id).status == RunStatus.SUCCEEDED
    fork = runqueue.fork(original.id, from_step=1, actor="a", reason="r")
    spend = TreeSpend.objects.get(run_id=fork.id)
    assert (spend.spend_cap, spend.cost) == (2, 0)
    assert SPEND_CAP == "spend_cap"
    assert ToolInvocation.objects.filter(run_id=fork.id).count() == 1
