"""The dashboard and /metrics say why due runs wait: a paused kind, a key at
its cap, a class no live worker claims; and who holds the running slots."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

import runqueue
from runqueue import leases, registry
from runqueue.capacity import pausing
from runqueue.models import ConcurrencyLimit, PriorityClass, Run, Worker
from runqueue.reads import waiting
from tests.database.admin.test_admin import DASHBOARD, login

pytestmark = pytest.mark.django_db

INTERACTIVE, ASYNC, MAINTENANCE = (int(c) for c in PriorityClass)


def _worker(worker_id: str, *, slots: dict) -> Worker:
    """A live worker with every kind this process has (as its claims ask)."""
    return Worker.objects.create(
        id=worker_id, hostname="h", pid=1, slots=slots, kinds=registry.served().row()
    )


@pytest.fixture
def stuck() -> dict:
    """acme at its interactive cap of 1 (one running, one due); test.echo
    paused in async; nothing serves maintenance."""
    _worker("w-live", slots={"interactive": 1, "async": 1})
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
    _worker("w", slots={"interactive,async,maintenance": 3})
    ConcurrencyLimit.objects.create(key="beta", priority_class=ASYNC, max_running=0)
    runqueue.submit(kind="k", tenant="beta", priority=ASYNC)
    [cause] = waiting.causes()
    assert (cause.reason, cause.subject, cause.waiting) == (waiting.KEY_AT_CAP, "beta", 1)
    assert "is paused (limit 0)" in cause.detail


# --- every reason, on the dashboard, the run's page and /metrics (issue 37) ---

LIVE = {"interactive": 2, "async,maintenance": 1}


def _held(reason: str) -> tuple[object, str, str, str, int]:
    """A due run held back for ``reason``, with both interactive slots free:
    (the run, the dashboard's words, the run page's words, the metric's
    reason label, how many due runs it holds)."""
    from runqueue.models import Budget

    _worker("w-live", slots=LIVE)
    if reason == "budget_requests":
        Budget.objects.create(key="gpt", requests=1, per_seconds=60)
        first = runqueue.submit(kind="k", tenant="acme", budget=("gpt", 10)).run
        lease = leases.claim_one("w-live")  # reserves the window's one request
        assert lease is not None and lease.run_id == first.id
        runqueue.submit(kind="k", tenant="acme", budget=("gpt", 10))
        run = runqueue.submit(kind="k", tenant="acme", budget=("gpt", 10)).run
        words = "budget gpt has used 1 of 1 request(s) in its 60 s window"
        return run, f"{words}: 2 due run(s) wait", words, "budget", 2
    if reason == "budget_paused":
        Budget.objects.create(key="gpt", tokens=1000, per_seconds=60)
        runqueue.pause_budget("gpt", 300)
        run = runqueue.submit(kind="k", tenant="acme", budget=("gpt", 10)).run
        return run, "budget gpt is paused until", "budget gpt is paused until", "budget", 1
    if reason == "budget_tokens":
        Budget.objects.create(key="gpt", tokens=1000, per_seconds=60)
        first = runqueue.submit(kind="k", tenant="acme", budget=("gpt", 900)).run
        lease = leases.claim_one("w-live")
        assert lease is not None and lease.run_id == first.id
        run = runqueue.submit(kind="k", tenant="acme", budget=("gpt", 200)).run
        words = "budget gpt has used 900 of 1000 token(s) in its 60 s window"
        return run, words, f"{words}; its call of 200 tokens does not fit", "budget", 1
    if reason == "key_at_cap":
        ConcurrencyLimit.objects.create(key="acme", priority_class=INTERACTIVE, max_running=1)
        runqueue.submit(kind="k", tenant="acme")
        assert leases.claim_one("w-live") is not None
        run = runqueue.submit(kind="k", tenant="acme").run
        words = "key acme has 1 running, its cap is 1"
        return run, f"{words}: 1 due run(s) wait", words, "key_at_cap", 1
    if reason == "paused_kind":
        pausing.pause_kind("test.echo", actor="staff:ann", reason="provider down")
        run = runqueue.submit(kind="test.echo").run
        words = "kind test.echo is paused (provider down, by staff:ann)"
        return run, f"{words}: 1 due run(s) wait", words, "paused_kind", 1
    if reason == "no_handler":
        # The live worker's code has no handler for test.echo (an older deploy).
        Worker.objects.filter(id="w-live").update(kinds={"k": {"versions": [1], "moves": {}}})
        run = runqueue.submit(kind="test.echo").run
        words = "no live worker has kind test.echo"
        return (
            run,
            f"{words}: 1 due run(s) wait",
            "No live worker has kind test.echo",
            waiting.NO_HANDLER,
            1,
        )
    if reason == "no_handler_version":
        run = runqueue.submit(kind="k").run
        # Pinned to version 3 by a worker that has stopped since.
        Run.objects.filter(id=run.id).update(handler_version=3)
        words = "no live worker has version 3 of kind k, which they are pinned to"
        page = "No live worker has version 3 of kind k, which the run is pinned to."
        return run, f"{words}: 1 due run(s) wait", page, waiting.NO_HANDLER, 1
    if reason == "no_worker":
        Worker.objects.filter(id="w-live").update(slots={"async": 1})
        run = runqueue.submit(kind="k").run
        words = "no live worker has a slot for interactive"
        return run, f"{words}: 1 due run(s) wait", words, "no_worker", 1
    raise AssertionError(reason)


def _samples() -> dict:
    text = Client().get("/metrics").content.decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize(
    "reason",
    [
        "budget_requests",
        "budget_paused",
        "budget_tokens",
        "key_at_cap",
        "paused_kind",
        "no_worker",
        "no_handler",
        "no_handler_version",
    ],
)
def test_each_reason_is_named_on_the_dashboard_the_run_page_and_in_metrics(reason) -> None:
    """Issue 37: two runs held by a budget, both interactive slots free; the
    dashboard said they wait only for a free slot, the run page "Not waiting"."""
    run, dashboard_words, page_words, label, n = _held(reason)
    client = login("ann", "view_run")
    dashboard = client.get(DASHBOARD).content.decode()
    why = dashboard[dashboard.index('id="rq-why-waiting"') :]
    why = why[: why.index("</div>")]
    assert dashboard_words in why, why
    assert "wait only for a free slot" not in why
    page = client.get(f"/admin/runqueue/run/{run.id}/change/").content.decode()
    assert page_words in page
    assert "Not waiting." not in page
    held = _samples()[
        ("runqueue_due_runs_held", frozenset({"class": "interactive", "reason": label}.items()))
    ]
    assert held == n


def test_a_parent_waiting_for_its_children_is_named_everywhere() -> None:
    """A parent does not start again before its children end: the dashboard
    counts it, its page names the open children, /metrics counts it."""
    from runqueue import runtime
    from runqueue.leases.outcomes import Suspended

    _worker("w-live", slots=LIVE)
    runqueue.submit(kind="test.fanout")
    lease = leases.claim_one("w-live", [PriorityClass.INTERACTIVE])
    child = runtime.build_context(lease).spawn("test.echo", priority=ASYNC)
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    client = login("ann", "view_run")
    dashboard = client.get(DASHBOARD).content.decode()
    assert '<span class="rq-waiting-children">children: 1</span>' in dashboard
    page = client.get(f"/admin/runqueue/run/{lease.run_id}/change/").content.decode()
    assert "Waits for its children (1 open)" in page
    assert f"/admin/runqueue/run/{child}/change/" in page
    assert _samples()[("runqueue_waiting_runs", frozenset({"reason": "children"}.items()))] == 1


def test_a_due_run_nothing_holds_waits_for_a_slot_and_says_how_many(django_assert_max_num_queries):
    _worker("w-live", slots=LIVE)
    run = runqueue.submit(kind="k").run
    page = login("ann", "view_run").get(f"/admin/runqueue/run/{run.id}/change/")
    text = page.content.decode()
    assert "Due, and nothing holds it back" in text
    assert "0 interactive run(s) running; live workers have 2 slot(s) for interactive" in text


def test_a_run_scheduled_later_says_so() -> None:
    import datetime as dt

    from django.utils import timezone

    later = timezone.now() + dt.timedelta(hours=1)
    run = runqueue.submit(kind="k", scheduled_for=later).run
    page = login("ann", "view_run").get(f"/admin/runqueue/run/{run.id}/change/")
    assert "Not due before" in page.content.decode()


def test_a_worker_with_loop_slots_serves_its_classes() -> None:
    """A slot group of coroutines is recorded as "async:loop": it claims async."""
    _worker("w", slots={"interactive,async:loop": 3})
    runqueue.submit(kind="k", priority=ASYNC)
    runqueue.submit(kind="k", priority=MAINTENANCE)
    assert [(c.cls, c.reason) for c in waiting.causes()] == [
        (PriorityClass.MAINTENANCE, waiting.NO_WORKER)
    ]


@pytest.mark.django_db(transaction=True)
def test_the_budget_cause_reads_at_most_the_cap_through_the_budget_index() -> None:
    """3,000 queued runs on a paused budget, analyzed: the statement walks
    runqueue_run_budget_idx and stops at the cap; with room in the window it
    reads no run at all."""
    import json

    from django.db import connection

    from runqueue import reads
    from runqueue.models import Budget
    from runqueue.sql import queries

    Budget.objects.create(key="gpt", tokens=1000, per_seconds=60)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, kind, payload,"
            " status, priority, attempts, max_attempts, lease_epoch, lease_owner, created_at,"
            " budget_key, budget_tokens)"
            " SELECT gen_random_uuid(), 't' || (g % 7), 't', '', 'k', '{}', 'queued', g % 30,"
            " 0, 3, 0, '', now() - make_interval(secs => g),"
            " CASE WHEN g % 2 = 0 THEN 'gpt' END, CASE WHEN g % 2 = 0 THEN 10 END"
            " FROM generate_series(1, 6000) g"
        )
        cursor.execute("ANALYZE runqueue_run")

    def scans() -> list[dict]:
        with reads.bounded() as cursor:  # as budgets_held runs it
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + queries()["budget_held"],
                {"cap": waiting.CAP + 1, "most": waiting.MOST},
            )
            document = cursor.fetchone()[0]
        plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
        found, stack = [], [plan]
        while stack:
            node = stack.pop()
            stack.extend(node.get("Plans", []))
            if node.get("Relation Name", "").startswith("runqueue_run"):
                found.append(node)
        return found

    assert all(n.get("Actual Loops", 0) == 0 for n in scans())  # room: nothing read
    runqueue.pause_budget("gpt", 300)
    read = [n for n in scans() if n.get("Actual Loops")]
    assert read, "the paused budget's runs are read"
    for node in read:
        assert node["Node Type"] == "Index Scan", node
        assert node["Index Name"].startswith("runqueue_run_budget_idx") or node[
            "Index Name"
        ].endswith("budget_idx"), node
        assert node["Actual Rows"] <= waiting.CAP + 1, node
    held = [c for c in waiting.causes() if c.reason == waiting.BUDGET]
    assert sum(c.waiting for c in held) == waiting.CAP + 1  # the runs read, by class
    assert all(" at least " in c.detail for c in held), held
