"""Claim latency is the wait since the run last became due: created,
requeued by an operator, given input, given back on shutdown, or its
``scheduled_for`` (a retry's backoff included). An old run that is requeued
must not count its whole age as queue wait (issue 13: a requeue logged
wait_ms=243673 and the interactive p99 jumped from 1.1 s to 137 s)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.utils import timezone

import runqueue
from runqueue import leases, testing
from runqueue.admin import dashboard
from runqueue.models import EventLog, PriorityClass, Run, RunStatus
from tests.helpers import claimed

pytestmark = pytest.mark.django_db

#: How old the runs are made before they become due again.
AGE = dt.timedelta(hours=2)
#: A generous bound on a claim's wait in a test that claims at once.
PROMPT_MS = 30_000


def age(run_id) -> None:
    """Pretend the run was created AGE ago (its events too)."""
    then = timezone.now() - AGE
    Run.objects.filter(id=run_id).update(created_at=then)


def last_wait_ms(run_id) -> float:
    event = EventLog.objects.filter(run_id=run_id, type="run.claimed").latest("id")
    return event.data["wait_ms"]


def operator_requeue(run_id) -> None:
    lease = claimed("w-latency", run_id=run_id)
    testing.fail(lease, leases.permanent_failure(ValueError("card declined"), lease.attempt))
    age(run_id)
    leases.requeue(run_id, actor="staff:test")


def input_delivery(run_id) -> None:
    lease = claimed("w-latency", run_id=run_id)
    leases.wait_for_user(lease, {"question": "refund?"})
    age(run_id)
    sub = runqueue.submit(kind="test.echo", session_id="conv-1", payload={"answer": "yes"})
    assert sub.outcome == "input_delivered"


def shutdown_release(run_id) -> None:
    lease = claimed("w-latency", run_id=run_id)
    age(run_id)
    assert leases.release(lease, "shutdown")


@pytest.mark.parametrize("due_again", [operator_requeue, input_delivery, shutdown_release])
def test_a_run_that_became_due_again_waits_from_then(due_again: Callable) -> None:
    run = runqueue.submit(kind="test.echo", session_id="conv-1").run
    due_again(run.id)
    assert Run.objects.get(id=run.id).status == RunStatus.QUEUED
    claimed("w-latency", run_id=run.id)
    assert 0 <= last_wait_ms(run.id) < PROMPT_MS
    # The dashboard reads the same figure.
    interactive = {s.cls: s for s in dashboard.class_stats()}[PriorityClass.INTERACTIVE]
    assert interactive.p99_ms < PROMPT_MS


def test_a_new_run_waits_from_its_creation() -> None:
    run = runqueue.submit(kind="test.echo").run
    age(run.id)
    claimed("w-latency", run_id=run.id)
    assert last_wait_ms(run.id) >= AGE.total_seconds() * 1000


def test_a_run_scheduled_before_its_creation_waits_from_its_creation() -> None:
    past = timezone.now() - dt.timedelta(days=1)
    run = runqueue.submit(kind="test.echo", scheduled_for=past).run
    claimed("w-latency", run_id=run.id)
    assert 0 <= last_wait_ms(run.id) < PROMPT_MS


def test_the_oldest_due_run_has_waited_since_it_became_due() -> None:
    """The dashboard's 'oldest due run waiting' uses the same start."""
    requeued = runqueue.submit(kind="test.echo").run
    operator_requeue(requeued.id)
    runqueue.submit(kind="test.echo", scheduled_for=timezone.now() - dt.timedelta(days=1))
    interactive = {s.cls: s for s in dashboard.class_stats()}[PriorityClass.INTERACTIVE]
    assert interactive.oldest_due.endswith(("ms", " s")), interactive.oldest_due
