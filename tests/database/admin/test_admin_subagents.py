"""The run page shows a run's parent and children (links both ways) and
its wait; the dashboard and /metrics count waiting runs by reason."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

import runqueue
from runqueue import leases, runtime
from runqueue.leases.outcomes import Suspended
from runqueue.models import PriorityClass, Run
from tests.database.admin.test_admin import login

pytestmark = pytest.mark.django_db


def _family() -> tuple[Run, Run]:
    runqueue.submit(kind="test.fanout")
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    child = runtime.build_context(lease).spawn("test.echo", priority=PriorityClass.ASYNC)
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    return Run.objects.get(id=lease.run_id), Run.objects.get(id=child)


def test_the_run_page_links_parent_and_children_and_shows_the_wait() -> None:
    parent, child = _family()
    client = login("viewer", "view_run")
    page = client.get(f"/admin/runqueue/run/{parent.id}/change/").content.decode()
    assert f"/admin/runqueue/run/{child.id}/change/" in page
    assert "Waits for its children (1 open) since" in page
    assert "with no deadline" in page
    page = client.get(f"/admin/runqueue/run/{child.id}/change/").content.decode()
    assert f"/admin/runqueue/run/{parent.id}/change/" in page
    # Queued, not waiting: the page says what holds it back (test_why_waiting.py).
    assert "no live worker has a slot for async." in page


def test_the_dashboard_and_metrics_count_waiting_runs_by_reason() -> None:
    _family()
    runqueue.submit(kind="test.wait_signal")
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert leases.write(lease, Suspended(reason="signal", wait_name="go", timeout=60))
    page = login("viewer", "view_run").get("/admin/runqueue/run/dashboard/").content.decode()
    assert '<span class="rq-waiting-children">children: 1</span>' in page
    assert '<span class="rq-waiting-signal">signal: 1</span>' in page
    text = Client().get("/metrics").content.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for reason, n in {"children": 1, "signal": 1, "timer": 0, "user": 0}.items():
        assert samples[("runqueue_waiting_runs", (("reason", reason),))] == n
    waiting = samples[("runqueue_runs", (("class", "interactive"), ("status", "waiting")))]
    assert waiting == 2


def test_cancelling_a_parent_confirms_every_run_it_will_cancel() -> None:
    """Issue 37: "Cancel 1 run(s)?" while the cancel cascades to the
    children, a running one included. The page names every run it cancels."""
    from tests.database.admin.test_admin import RUNS, action

    runqueue.submit(kind="test.fanout")
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    ctx = runtime.build_context(lease)
    running_child = ctx.spawn("test.echo", priority=PriorityClass.ASYNC)
    waiting_child = ctx.spawn("test.fanout", priority=PriorityClass.MAINTENANCE)
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    child_lease = leases.claim_one("w", [PriorityClass.ASYNC])
    assert child_lease is not None and child_lease.run_id == running_child
    maintenance = leases.claim_one("w", [PriorityClass.MAINTENANCE])
    grandchild = runtime.build_context(maintenance).spawn("test.echo")
    assert leases.write(maintenance, Suspended(reason="children", state={"joined": True}))
    finished = runqueue.submit(kind="test.echo").run  # not below the parent
    parent = Run.objects.get(id=lease.run_id)

    client = login("ann", "view_run", "cancel_run")
    page = action(client, RUNS, "cancel_runs", [parent]).content.decode()
    assert "Cancel 4 run(s)?" in page
    below = page[page.index('id="rq-descendants"') :]
    for run_id in (running_child, waiting_child, grandchild):
        assert str(run_id) in below
    assert str(finished.id) not in page
    assert "1 of them is running" in page

    action(client, RUNS, "cancel_runs", [parent], confirm="yes", reason="stop")
    statuses = dict(Run.objects.values_list("id", "status"))
    for run_id in (parent.id, running_child, waiting_child, grandchild):
        assert statuses[run_id] == "cancelled"
    assert statuses[finished.id] == "queued"
