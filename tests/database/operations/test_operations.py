"""Operator actions behind the admin and API: requeue, resolve, housekeeping."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

import runqueue
from runqueue import leases, testing
from runqueue.errors import ActiveRunConflict, InvalidTransition
from runqueue.history import housekeeping
from runqueue.models import EventLog, Idempotency, IdempotencyKey, Run, ToolStatus
from tests.helpers import event_types

pytestmark = pytest.mark.django_db


def _dead_lettered(session_id: str | None = None) -> Run:
    sub = runqueue.submit(kind="k", session_id=session_id)
    lease = leases.claim_one("w")
    testing.fail(lease, leases.permanent_failure(ValueError("boom"), lease.attempt))
    return Run.objects.get(id=sub.run.id)


def test_requeue_a_dead_lettered_run() -> None:
    run = _dead_lettered()
    requeued = leases.requeue(run.id, actor="support:ann", reason="provider fixed")
    assert (requeued.status, requeued.attempts, requeued.failure) == ("queued", 0, None)
    assert requeued.lease_epoch == run.lease_epoch + 1
    event = EventLog.objects.get(run_id=run.id, type="run.operator_requeued")
    assert event.data["actor"] == "support:ann"
    assert event.data["previous_failure"]["message"] == "boom"
    assert leases.claim_one("w2").run_id == run.id


def test_requeue_refuses_a_run_that_is_not_dead_lettered() -> None:
    sub = runqueue.submit(kind="k")
    with pytest.raises(InvalidTransition) as excinfo:
        leases.requeue(sub.run.id, actor="a")
    assert str(excinfo.value) == f"cannot requeue run {sub.run.id}: it is queued"


def test_requeue_when_the_session_has_another_active_run() -> None:
    run = _dead_lettered(session_id="s1")
    other = runqueue.submit(kind="k", session_id="s1").run
    with pytest.raises(ActiveRunConflict) as excinfo:
        leases.requeue(run.id, actor="a")
    assert excinfo.value.run_id == other.id
    assert Run.objects.get(id=run.id).status == "failed"
    assert "run.operator_requeued" not in event_types(run.id)


@runqueue.handler("ops.timeout")
def _timeout_handler(ctx):
    def pay():
        raise runqueue.UncertainOutcome("timed out")

    return ctx.invoke_tool("pay", pay, idempotency=Idempotency.NON_IDEMPOTENT).status


def test_resolve_uncertain_records_the_answer_and_leaves_the_view() -> None:
    sub = runqueue.submit(kind="ops.timeout")
    testing.execute(leases.claim_one("w"))
    tool = sub.run.tool_invocations.get()
    assert tool.status == ToolStatus.UNCERTAIN
    assert Run.objects.uncertain().filter(id=sub.run.id).exists()
    leases.resolve_uncertain(tool.id, happened=True, note="seen in the PSP dashboard", actor="ann")
    tool.refresh_from_db()
    assert tool.resolution["happened"] is True and tool.resolution["actor"] == "ann"
    assert not Run.objects.uncertain().filter(id=sub.run.id).exists()
    resolved = EventLog.objects.get(run_id=sub.run.id, type="tool.resolved")
    assert resolved.data["note"] == "seen in the PSP dashboard"
    with pytest.raises(InvalidTransition):
        leases.resolve_uncertain(tool.id, happened=False, note="again", actor="bob")


def test_housekeeping_is_scheduled_once_and_prunes(settings, fast_retry) -> None:
    settings.RUNQUEUE = {"TERMINAL_RUN_RETENTION_SECONDS": 60}
    old = _dead_lettered()
    # Retention drops whole days: a run goes once its day is wholly past it.
    Run.objects.filter(id=old.id).update(finished_at=timezone.now() - dt.timedelta(days=2))
    recent = _dead_lettered()
    keyed = runqueue.submit(kind="k", idempotency_key="old").run
    IdempotencyKey.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))

    first = housekeeping.schedule()
    assert len(first) == 4  # keys, finished runs, signals, inbound events
    assert housekeeping.schedule() == []  # already queued: the session holds them
    while lease := leases.claim_one("w", [runqueue.PriorityClass.MAINTENANCE]):
        assert testing.execute(lease) == "succeeded"
    assert not IdempotencyKey.objects.exists()
    assert not Run.objects.filter(id=old.id).exists()
    assert not EventLog.objects.filter(run_id=old.id).exists()
    assert Run.objects.filter(id__in=[recent.id, keyed.id]).count() == 2


def test_pruning_counts_the_runs_it_deleted_not_their_rows() -> None:
    """Three old dead letters (each with its events), one recent: three runs
    pruned, the recent one kept."""
    old = [_dead_lettered() for _ in range(3)]
    Run.objects.filter(id__in=[r.id for r in old]).update(
        finished_at=timezone.now() - dt.timedelta(days=2)
    )
    recent = _dead_lettered()
    assert EventLog.objects.filter(run_id__in=[r.id for r in old]).count() > 3
    assert housekeeping.prune_terminal(60).runs == 3
    assert list(Run.objects.values_list("id", flat=True)) == [recent.id]
