"""The dashboard and /metrics say why due runs wait: a paused kind, a key at
its cap, a class no live worker claims; and who holds the running slots."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

import runqueue
from runqueue import leases, pausing, waiting
from runqueue.models import ConcurrencyLimit, PriorityClass, Worker
from tests.test_admin import DASHBOARD, login

pytestmark = pytest.mark.django_db

INTERACTIVE, ASYNC, MAINTENANCE = (int(c) for c in PriorityClass)


@pytest.fixture
def stuck() -> dict:
    """acme at its interactive cap of 1 (one running, one due); test.echo
    paused in async; nothing serves maintenance."""
    Worker.objects.create(id="w-live", hostname="h", pid=1, slots={"interactive": 1, "async": 1})
    ConcurrencyLimit.objects.create(key="acme", priority_class=INTERACTIVE, max_running=1)
    running = runqueue.submit(kind="k", tenant="acme", priority=INTERACTIVE).run
    lease = leases.claim_one("w-live")
    assert lease is not None and lease.run_id == running.id
    runqueue.submit(kind="k", tenant="acme", priority=INTERACTIVE)
    pausing.pause_kind("test.echo", actor="staff:ann", reason="provider down")
    for _ in range(2):
        runqueue.submit(kind="test.echo", priority=ASYNC)
    runqueue.submit(kind="k", priority=MAINTENANCE)
    return {"running": running}


def test_the_causes_name_each_reason(stuck) -> None:
    found = {(c.cls, c.reason, c.subject, c.waiting) for c in waiting.causes()}
    assert found == {
        (PriorityClass.INTERACTIVE, waiting.KEY_AT_CAP, "acme", 1),
        (PriorityClass.ASYNC, waiting.PAUSED_KIND, "test.echo", 2),
        (PriorityClass.MAINTENANCE, waiting.NO_WORKER, "", 1),
    }


def test_the_dashboard_says_why_and_who_holds_the_slots(stuck) -> None:
    """Issue 26: the dashboard showed "oldest due run waiting 111 s" and nothing else."""
    client = login("ann", "view_run")
    page = client.get(DASHBOARD).content.decode()
    assert "key acme has 1 running, its cap is 1: 1 due run(s) wait" in page
    assert "kind test.echo is paused (provider down, by staff:ann): 2 due run(s) wait" in page
    assert "no live worker has a slot for maintenance: 1 due run(s) wait" in page
    assert f"?status__exact=running&amp;class={INTERACTIVE}" in page  # "Running 1" is a link
    run_id = str(stuck["running"].id)
    holders = page[page.index('id="rq-holders"') :]
    assert f"/admin/runqueue/run/{run_id}/change/" in holders
    assert "<td>w-live</td>" in holders


def test_metrics_count_held_runs_by_cause(stuck) -> None:
    text = Client().get("/metrics").content.decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def held(cls: str, reason: str) -> float:
        return samples[
            ("runqueue_due_runs_held", frozenset({"class": cls, "reason": reason}.items()))
        ]

    assert held("interactive", "key_at_cap") == 1
    assert held("async", "paused_kind") == 2
    assert held("maintenance", "no_worker") == 1
    assert held("interactive", "paused_kind") == 0
    assert samples[("runqueue_paused_kinds", frozenset())] == 1
    assert samples[("runqueue_keys_at_cap", frozenset({"class": "interactive"}.items()))] == 1


def test_a_key_limited_to_zero_is_a_cause_without_running_runs() -> None:
    Worker.objects.create(id="w", hostname="h", pid=1, slots={"interactive,async,maintenance": 3})
    ConcurrencyLimit.objects.create(key="beta", priority_class=ASYNC, max_running=0)
    runqueue.submit(kind="k", tenant="beta", priority=ASYNC)
    [cause] = waiting.causes()
    assert (cause.reason, cause.subject, cause.waiting) == (waiting.KEY_AT_CAP, "beta", 1)
    assert "is paused (limit 0)" in cause.detail
