"""Retention and a tree's totals (runqueue.history.partitions, runqueue.history.usage): a
tree goes whole, so its totals row (the root's) always sums the usage
records that name that root, and a run still live keeps its tree's spend
cap. The run-tree model's ``a_trees_totals_are_its_usage_records`` found
a root dropped under a child still running: the child's records stayed
without their totals, and its next record, finding no root, started an
uncapped tree of its own."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.utils import timezone

import runqueue
from runqueue import leases, runtime, testing
from runqueue.errors import SpendCapReached
from runqueue.history import partitions, usage
from runqueue.leases.outcomes import Suspended
from runqueue.models import PriorityClass, Run, RunStatus, TreeSpend, Usage
from tests.helpers import claimed

pytestmark = pytest.mark.django_db(transaction=True)

DAY = dt.timedelta(days=1)
RETENTION = 5 * 86400
INTER, ASYNC = PriorityClass.INTERACTIVE, PriorityClass.ASYNC


@pytest.fixture(params=["day partitions", "default partition"])
def old_days(request) -> str:
    """The old days have partitions of their own (dropped whole), or none
    (their rows are in the default partitions, deleted row by row)."""
    if request.param == "day partitions":
        partitions.ensure(today=timezone.now().astimezone(dt.UTC).date() - 12 * DAY, ahead=12)
    return request.param


def _record(ctx: runtime.RunContext, cost: str) -> None:
    ctx.record_usage(model="m", input_tokens=10, output_tokens=5, cost=Decimal(cost))


def _age(run_ids: list[uuid.UUID], at: dt.datetime) -> None:
    """Finished runs finished at ``at``: their rows land in that day."""
    Run.objects.filter(id__in=run_ids).update(created_at=at, started_at=at, finished_at=at)


def _spent(root: uuid.UUID) -> tuple[int, Decimal]:
    """The tree's calls and cost, from its totals row, which must be the
    sums of its usage records."""
    assert not (wrong := testing.tree_totals_mismatches()), wrong
    totals = usage.tree_totals(root)
    return totals.calls, totals.cost


def test_a_root_finished_before_its_children_keeps_its_tree_and_its_cap(old_days) -> None:
    """A capped root records a call, spawns two children and finishes
    without waiting; one child records a call and finishes, the other
    records one and waits for a signal. Eight days on, a five-day retention
    keeps the whole tree (the waiting child is live): every record still
    counts in the root's totals, and the waiting child, resumed, records
    under the root's cap, which its call reaches. Once the whole tree is
    finished and past the retention, it goes with its totals."""
    root = runqueue.submit(kind="k", spend_cap=Decimal("0.07")).run.id
    lease = claimed(classes=[INTER], run_id=root)
    ctx = runtime.build_context(lease)
    _record(ctx, "0.01")
    done, waiting = (ctx.spawn("test.echo", {"i": i}, priority=ASYNC) for i in range(2))
    assert testing.succeed(lease)
    child = claimed(classes=[ASYNC], run_id=done)
    _record(runtime.build_context(child), "0.02")
    assert testing.succeed(child)
    child = claimed(classes=[ASYNC], run_id=waiting)
    _record(runtime.build_context(child), "0.02")
    assert leases.write(child, Suspended(reason="signal", wait_name="go", state={}))
    eight_days_ago = timezone.now() - 8 * DAY
    _age([root, done], eight_days_ago)

    partitions.prune(older_than_seconds=RETENTION)

    assert Run.objects.filter(id__in=[root, done, waiting]).count() == 3
    assert _spent(root) == (3, Decimal("0.05"))
    assert usage.tree_of(waiting).root_id == root

    assert runqueue.signal(waiting, "go", {}) == "delivered"
    child = claimed(classes=[ASYNC], run_id=waiting)
    with pytest.raises(SpendCapReached) as capped:
        _record(runtime.build_context(child), "0.02")
    assert capped.value.root_id == root
    assert Run.objects.get(id=waiting).status == RunStatus.CANCELLED
    assert _spent(root) == (4, Decimal("0.07"))

    _age([root, done, waiting], eight_days_ago)
    partitions.prune(older_than_seconds=RETENTION)
    assert not Run.objects.filter(id__in=[root, done, waiting]).exists()
    assert not Usage.objects.exists()
    assert not TreeSpend.objects.exists()
