"""Retention and run trees (runqueue.history.partitions): a finished run is kept
while any run of its tree is not terminal or not past the retention, so a
parent never resumes with fewer children than it spawned (a root's totals:
tests/database/history/test_usage_retention.py); every table
keyed by a run goes with the run; ``ctx.children()`` raises, never skips, a
child that is gone; housekeeping empties the mailbox of finished runs."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.apps import apps
from django.db.models.functions import Now
from django.utils import timezone

import runqueue
from runqueue import leases, runtime, testing
from runqueue.errors import ChildrenGone
from runqueue.history import housekeeping, partitions
from runqueue.leases.outcomes import Suspended
from runqueue.models import (
    Checkpoint,
    EventLog,
    IdempotencyKey,
    PriorityClass,
    Run,
    RunEvent,
    Signal,
    StreamWatch,
    ToolInvocation,
)

pytestmark = pytest.mark.django_db

DAY = dt.timedelta(days=1)
RETENTION = 5 * 86400
INTER, ASYNC = PriorityClass.INTERACTIVE, PriorityClass.ASYNC


def _today() -> dt.date:
    return timezone.now().astimezone(dt.UTC).date()


def _age(run_ids: list[uuid.UUID], at: dt.datetime) -> None:
    """Move runs and everything of theirs back to ``at`` (finished ones
    finished then): their rows land in that day's partitions."""
    runs = Run.objects.filter(id__in=run_ids)
    runs.filter(finished_at__isnull=False).update(created_at=at, started_at=at, finished_at=at)
    runs.filter(finished_at__isnull=True).update(created_at=at)
    runs.filter(claimed_at__isnull=False).update(claimed_at=at)
    RunEvent.objects.filter(run_id__in=run_ids).update(created_at=at)
    ToolInvocation.objects.filter(run_id__in=run_ids).update(created_at=at)


def _rows(run_id: uuid.UUID) -> tuple[int, int, int]:
    return (
        Run.objects.filter(pk=run_id).count(),
        EventLog.objects.filter(run_id=run_id).count(),
        ToolInvocation.objects.filter(run_id=run_id).count(),
    )


def _finish(run_id: uuid.UUID, classes=(ASYNC,)) -> leases.Lease:
    lease = leases.claim_one("w", list(classes))
    assert lease is not None and lease.run_id == run_id
    return lease


@pytest.fixture(params=["day partitions", "default partition"])
def old_days(request) -> str:
    """The old days have partitions of their own (dropped whole), or none
    (their rows are in the default partitions, deleted row by row)."""
    if request.param == "day partitions":
        partitions.ensure(today=_today() - 12 * DAY, ahead=12)
    return request.param


def test_a_parent_still_waiting_keeps_its_finished_children_and_grandchildren(old_days) -> None:
    """Two children, one of which spawned a grandchild, finished eight days
    ago; the parent waits for a signal. A five-day retention keeps all of
    them with their rows, and the parent, resumed, reads both children.
    Once the parent is finished and past the retention too, the tree goes."""
    runqueue.submit(kind="k")
    parent = leases.claim_one("w", [INTER])
    ctx = runtime.build_context(parent)
    first, second = (ctx.spawn("test.echo", {"i": i}, priority=ASYNC) for i in range(2))
    assert leases.write(parent, Suspended(reason="signal", wait_name="go", state={}))
    child = _finish(first)
    grandchild = runtime.build_context(child).spawn("test.echo", priority=ASYNC)
    assert testing.succeed(child, {"i": 0})  # finished without waiting for its own child
    assert testing.succeed(_finish(second), {"i": 1})
    assert testing.succeed(_finish(grandchild))
    loner = runqueue.submit(kind="k").run.id  # no tree: dropped as before
    assert testing.succeed(_finish(loner, [INTER]))
    eight_days_ago = timezone.now() - 8 * DAY
    _age([first, second, grandchild, loner], eight_days_ago)
    before = {i: _rows(i) for i in (first, second, grandchild)}

    pruned = partitions.prune(older_than_seconds=RETENTION)

    assert pruned.runs == 1 and pruned.kept_runs == 3
    assert _rows(loner) == (0, 0, 0)
    assert {i: _rows(i) for i in (first, second, grandchild)} == before
    assert runqueue.signal(parent.run_id, "go", {"ok": True}) == "delivered"
    resumed = leases.claim_one("w", [INTER])
    assert resumed is not None and resumed.run_id == parent.run_id
    assert [c.id for c in runtime.build_context(resumed).children()] == [first, second]
    # Pruned again: still kept, nothing copied twice.
    assert partitions.prune(older_than_seconds=RETENTION).runs == 0
    assert {i: _rows(i) for i in (first, second, grandchild)} == before

    assert testing.succeed(resumed)
    partitions.prune(older_than_seconds=RETENTION)  # finished today: all kept
    assert Run.objects.filter(id__in=[parent.run_id, first, second, grandchild]).count() == 4
    _age([parent.run_id], eight_days_ago)
    partitions.prune(older_than_seconds=RETENTION)
    for run_id in (parent.run_id, first, second, grandchild):
        assert _rows(run_id) == (0, 0, 0)


def _keyed_by_a_run() -> set[str]:
    """Every runqueue table with a key to a run (a foreign key to Run or a
    run_id column), the run's own table and views (the event log) aside."""
    tables = set()
    for model in apps.get_app_config("runqueue").get_models():
        if model._meta.proxy or not model._meta.managed or model is Run:
            continue
        for field in model._meta.concrete_fields:
            if field.related_model is Run or field.column == "run_id":
                tables.add(model._meta.db_table)
    return tables


def test_every_table_keyed_by_a_run_goes_with_it() -> None:
    assert _keyed_by_a_run() == {*partitions.DEPENDANTS, partitions.EVENTS.parent}


def test_a_dropped_run_leaves_no_row_behind(old_days) -> None:
    """A run with a row in every table keyed by a run: after the prune,
    none is left, and a live run's are all kept."""
    made = []
    for _ in range(2):
        sub = runqueue.submit(kind="k", idempotency_key=f"key-{len(made)}")
        runqueue.signal(sub.run.id, "later", {"n": 1})  # kept in the mailbox
        lease = leases.claim_one("w", [INTER])
        leases.checkpoint(lease, {"step": 1})
        leases.record_tool_started(
            lease, seq=0, tool="search", idempotency="idempotent", arguments={}
        )
        StreamWatch.objects.create(run_id=sub.run.id, watcher="web-1", expires_at=Now())
        made.append(lease)
    old, live = made
    assert testing.succeed(old)
    _age([old.run_id], timezone.now() - 8 * DAY)
    tables = {
        "signal": Signal,
        "stream watch": StreamWatch,
        "checkpoint": Checkpoint,
        "tool": ToolInvocation,
        "key": IdempotencyKey,
        "event": RunEvent,
    }

    partitions.prune(older_than_seconds=RETENTION)

    left = {
        name: model.objects.filter(run_id=old.run_id).count() for name, model in tables.items()
    }
    assert left == dict.fromkeys(tables, 0)
    kept = {
        name: model.objects.filter(run_id=live.run_id).exists() for name, model in tables.items()
    }
    assert kept == dict.fromkeys(tables, True)


def test_children_raises_for_a_child_that_is_gone() -> None:
    """A child deleted under its parent is an error naming it, never a
    shorter list."""
    runqueue.submit(kind="k")
    ctx = runtime.build_context(leases.claim_one("w", [INTER]))
    first, second = (ctx.spawn("test.echo", {"i": i}, priority=ASYNC) for i in range(2))
    Run.objects.filter(id=first).delete()
    with pytest.raises(ChildrenGone) as raised:
        ctx.children()
    assert raised.value.missing == [first]
    assert str(raised.value) == (
        f"run {ctx.run.id}: 1 of its 2 children cannot be found ({first}); "
        "deleted, or dropped by the retention"
    )


def test_housekeeping_empties_the_mailbox_of_finished_runs() -> None:
    """Signals kept for a run that then finished without waiting for them
    go with the next housekeeping; a live run's stay."""
    finished, live = (runqueue.submit(kind="k").run.id for _ in range(2))
    for run_id in (finished, live):
        assert runqueue.signal(run_id, "later", {"n": 1}) == "kept"
    assert testing.succeed(_finish(finished, [INTER]))

    assert housekeeping.delete_finished_signals(batch=1) == 1

    assert list(Signal.objects.values_list("run_id", flat=True)) == [live]
    assert housekeeping.delete_finished_signals() == 0


def test_a_child_that_cannot_be_found_is_a_transient_error() -> None:
    """A prune hides a kept child between its detach of the day and its copy
    of the kept runs: the attempt is retried (with backoff), never
    dead-lettered at once; a child gone for good is once attempts run out."""
    from runqueue.errors import TRANSIENT, ChildrenGone, classify

    gone = ChildrenGone("parent", [uuid.uuid4()], 2)
    assert classify(gone) == TRANSIENT
    assert isinstance(gone, LookupError)
