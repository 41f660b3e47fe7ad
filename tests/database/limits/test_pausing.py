"""Pausing a kind: the claim skips it (in one class or all), its queued runs
wait, running ones finish, and the runs table is not written."""

from __future__ import annotations

import random

import pytest
from django.db import connection
from django.utils import timezone

import runqueue
from runqueue import leases, testing
from runqueue.capacity.pausing import is_paused, pause_kind, resume_kind
from runqueue.models import PausedKind, PriorityClass, QueueEvent, Run, RunStatus
from runqueue.sql import queries

pytestmark = pytest.mark.django_db


def submit(kind: str, priority: int = 0) -> Run:
    return runqueue.submit(kind=kind, priority=priority).run


def claimed_kinds(limit: int = 10) -> list[str]:
    return sorted(lease.run.kind for lease in leases.claim("w", limit=limit))


def row_versions() -> dict[str, int]:
    """Each run's xmin: it changes when anything writes the row."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, xmin::text FROM runqueue_run")
        return dict(cursor.fetchall())


def test_a_paused_kind_is_not_claimed_and_its_runs_are_not_written() -> None:
    paused = [submit("k") for _ in range(3)]
    submit("other")
    before = row_versions()
    row, created = pause_kind("k", actor="staff:ann", reason="provider outage")
    assert created and row.priority_class is None and row.paused_by == "staff:ann"
    assert row_versions() == before  # a pause writes no run row
    assert claimed_kinds() == ["other"]
    assert set(
        Run.objects.filter(id__in=[r.id for r in paused]).values_list("status", flat=True)
    ) == {RunStatus.QUEUED}
    assert resume_kind("k", actor="staff:bob", reason="provider back")
    assert claimed_kinds() == ["k", "k", "k"]
    events = list(QueueEvent.objects.order_by("id").values_list("type", "subject", "data"))
    assert events == [
        (
            "kind.paused",
            "k",
            {"priority_class": "all", "actor": "staff:ann", "reason": "provider outage"},
        ),
        (
            "kind.resumed",
            "k",
            {"priority_class": "all", "actor": "staff:bob", "reason": "provider back"},
        ),
    ]


def test_a_kind_can_be_paused_in_one_class_only() -> None:
    submit("k", PriorityClass.INTERACTIVE)
    submit("k", 12)  # async
    submit("k", PriorityClass.MAINTENANCE)
    pause_kind("k", priority_class=PriorityClass.ASYNC, actor="staff:ann", reason="async backlog")
    assert is_paused("k", 15) and not is_paused("k", 5) and not is_paused("other", 15)
    got = leases.claim("w", limit=10)
    assert sorted(lease.run.priority for lease in got) == [0, 20]
    pause_kind("k", actor="staff:ann", reason="all of it")  # both pauses can stand
    assert is_paused("k", 5)
    resume_kind("k", priority_class=PriorityClass.ASYNC, actor="staff:ann")
    assert claimed_kinds() == []  # still paused in every class
    resume_kind("k", actor="staff:ann")
    assert claimed_kinds() == ["k"]


def test_running_runs_of_a_paused_kind_finish() -> None:
    first = submit("k")
    lease = leases.claim_one("w")
    assert lease is not None and lease.run_id == first.id
    waiting = submit("k")
    pause_kind("k", actor="staff:ann", reason="incident")
    assert leases.heartbeat(lease)  # the pause does not fence anyone
    assert testing.succeed(lease, {"ok": True})
    assert Run.objects.get(id=first.id).status == RunStatus.SUCCEEDED
    assert leases.claim_one("w") is None
    assert Run.objects.get(id=waiting.id).status == RunStatus.QUEUED


def test_pausing_twice_and_resuming_what_is_not_paused_change_nothing() -> None:
    pause_kind("k", actor="staff:ann", reason="one")
    row, created = pause_kind("k", actor="staff:bob", reason="two")
    assert not created and row.reason == "one"
    assert not resume_kind("k", priority_class=10, actor="staff:ann")
    assert QueueEvent.objects.count() == 1 and PausedKind.objects.count() == 1
    with pytest.raises(ValueError, match="a pause needs a reason"):
        pause_kind("x", actor="staff:ann", reason="  ")
    with pytest.raises(ValueError, match="priority_class must be one of"):
        pause_kind("x", priority_class=5, actor="staff:ann", reason="r")
    with pytest.raises(ValueError, match="kind must be a 1-255 character string"):
        pause_kind("", actor="staff:ann", reason="r")


@pytest.mark.django_db(transaction=True)
def test_resuming_wakes_the_idle_workers_of_the_class(raw_connect) -> None:
    listener = raw_connect()
    listener.execute("LISTEN runqueue")
    pause_kind("k", priority_class=PriorityClass.ASYNC, actor="staff:ann", reason="r")
    assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    resume_kind("k", priority_class=PriorityClass.ASYNC, actor="staff:ann")
    (note,) = listener.notifies(timeout=5, stop_after=1)
    assert note.payload == "async"


def test_the_claim_stays_one_indexed_statement_with_kinds_paused() -> None:
    """EXPLAIN after ANALYZE, with a backlog and pauses: the candidate query
    still walks the partial claim index once (an InitPlan), and the pause
    check is a subplan probing the small paused-kind table per candidate,
    never a join (which may come unordered) nor a scan of runs."""
    kinds = ["k", "other", "chat.turn"]
    Run.objects.bulk_create(
        [
            Run(kind=random.choice(kinds), priority=random.choice([0, 10, 20]), payload={})
            for _ in range(5000)
        ]
    )
    Run.objects.filter(priority=10).update(status=RunStatus.SUCCEEDED, finished_at=timezone.now())
    pause_kind("k", actor="staff:ann", reason="r")
    pause_kind("other", priority_class=0, actor="staff:ann", reason="r")
    from runqueue.leases.claim import statement_params

    spec = leases.claim_spec("w", [PriorityClass.INTERACTIVE], limit=10, lease_seconds=30)
    params = statement_params((), spec)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
        cursor.execute("ANALYZE runqueue_paused_kind")
        cursor.execute("EXPLAIN " + queries()["finish_and_claim"], params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "runqueue_run_claim_idx" in plan, plan
    assert "InitPlan" in plan, plan
    assert "Seq Scan on runqueue_run " not in plan, plan
    assert "SubPlan" in plan and "runqueue_paused_kind" in plan, plan
    assert "Anti Join" not in plan, plan
    assert {
        lease.run.kind for lease in leases.claim("w", [PriorityClass.INTERACTIVE], limit=50)
    } == {"chat.turn"}
