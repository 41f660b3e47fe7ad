"""The queue dashboard: its numbers come from indexed reads of real rows."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import runqueue
from runqueue.admin import dashboard
from runqueue.models import PriorityClass, RunEvent, Worker
from tests.admin_support import PASSWORD, dead_lettered, staff, uncertain

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:runqueue_run_dashboard")


def claimed_events(priority: int, waits: list[int]) -> None:
    """run.claimed events as the claim writes them (priority, wait_ms)."""
    run = runqueue.submit(kind="test.echo", priority=priority).run
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run, type="run.claimed", lease_epoch=1, data={"priority": priority, "wait_ms": w}
        )
        for w in waits
    )


def test_claim_latency_percentiles_per_class_from_the_event_log() -> None:
    claimed_events(0, list(range(101)))  # 0..100 ms
    claimed_events(12, [1000, 3000])
    old = runqueue.submit(kind="test.echo", priority=25).run
    RunEvent.objects.create(
        run=old, type="run.claimed", lease_epoch=1, data={"priority": 25, "wait_ms": 9}
    )
    RunEvent.objects.filter(run=old).update(created_at=timezone.now() - dt.timedelta(hours=2))

    stats = {s.cls: s for s in dashboard.class_stats()}
    interactive = stats[PriorityClass.INTERACTIVE]
    assert interactive.claims == 101
    assert interactive.p50_ms == pytest.approx(50)
    assert interactive.p99_ms == pytest.approx(99)
    assert (stats[PriorityClass.ASYNC].p50_ms, stats[PriorityClass.ASYNC].claims) == (2000, 2)
    # an event older than the hour does not count
    assert (stats[PriorityClass.MAINTENANCE].claims, stats[PriorityClass.MAINTENANCE].p50_ms) == (
        0,
        None,
    )


def test_depth_oldest_due_totals_and_workers() -> None:
    dead_lettered()
    uncertain()
    for priority in (0, 1, 15):
        runqueue.submit(kind="test.echo", priority=priority)
    later = timezone.now() + dt.timedelta(hours=1)
    runqueue.submit(kind="test.echo", priority=22, scheduled_for=later)  # not due
    Worker.objects.create(id="w-live", hostname="h", pid=1)
    Worker.objects.create(
        id="w-gone", hostname="h", pid=2, last_seen_at=timezone.now() - dt.timedelta(hours=1)
    )
    Worker.objects.create(id="w-stopped", hostname="h", pid=3, stopped_at=timezone.now())

    stats = {s.cls: s for s in dashboard.class_stats()}
    assert stats[PriorityClass.INTERACTIVE].depth == {"queued": 2}
    assert stats[PriorityClass.ASYNC].depth == {"queued": 1}
    assert stats[PriorityClass.MAINTENANCE].depth == {"queued": 1}
    assert stats[PriorityClass.INTERACTIVE].oldest_due.endswith(" ms")
    assert stats[PriorityClass.MAINTENANCE].oldest_due == "-"  # scheduled later: not due
    totals = dashboard.totals()
    assert totals == {
        "dead_lettered_hour": 1,
        "dead_lettered": 1,
        "uncertain_runs": 1,
        "uncertain_tools": 1,
    }
    assert [w.id for w in dashboard.live_workers()] == ["w-live"]
    finished = sum(sum(c.values()) for _m, c in dashboard.throughput())
    assert finished == 2  # the dead letter and the uncertain run (which succeeded)


def test_the_dashboard_page_draws_svg_and_is_linked(django_assert_max_num_queries) -> None:
    dead_lettered()
    claimed_events(0, [5, 10])
    staff("ivy", "view_run")
    client = Client()
    assert client.login(username="ivy", password=PASSWORD)
    # 14, and why due runs wait: paused kinds, limits, running keys, live
    # workers, one capped count per class no worker serves, budgets without
    # room (one statement), the slot holders; and the waiting runs by
    # reason, in one statement; the live workers' kinds for the causes and
    # the active runs by kind and version (runqueue.reads.versions); in a
    # transaction planned without JIT (its set_config, and the savepoint
    # of the bounded reads inside it); the depth is the scrape's bounded
    # reads, the oldest due run's too (their savepoint, two settings, two
    # statements, its release), and the budgets' cause in bounded reads too.
    with django_assert_max_num_queries(37):
        page = client.get(DASHBOARD)
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="rq-chart"') == 3
    assert 'aria-label="Queue depth by class"' in html
    assert 'aria-label="Claim latency, last hour"' in html
    # Nothing is fetched from outside: no script and no external URL.
    assert '<script src="http' not in html
    assert "https://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for url in (reverse("admin:index"), reverse("admin:app_list", args=["runqueue"])):
        assert DASHBOARD in client.get(url).content.decode(), url
    assert DASHBOARD in client.get(reverse("admin:runqueue_run_changelist")).content.decode()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250 ms"), (42, "42 s"), (600, "10 min"), (3 * 3600 + 300, "3 h 5 min")],
)
def test_durations_read_at_a_glance(seconds: float, text: str) -> None:
    from runqueue.admin.display import duration

    assert duration(dt.timedelta(seconds=seconds)) == text


def test_a_sessions_pending_turns_count_in_the_depth_and_show_on_the_page(admin_client) -> None:
    runqueue.submit(kind="test.echo", session_id="chat-1", priority=1)
    for _ in range(2):
        runqueue.submit(kind="test.echo", session_id="chat-1", priority=1, on_busy="enqueue")
    stats = {s.cls: s for s in dashboard.class_stats()}
    assert stats[PriorityClass.INTERACTIVE].depth == {"queued": 1, "pending": 2}
    html = admin_client.get(reverse("admin:runqueue_run_dashboard")).content.decode()
    assert "pending turns" in html and "<td>2</td>" in html


def test_a_depth_over_the_cap_is_the_planners_estimate_and_says_so(monkeypatch) -> None:
    """The depth reads at most DEPTH_CAP runs per class and status (with
    the scrape's statements); above it the figure is an estimate, marked ≈."""
    monkeypatch.setattr(dashboard, "DEPTH_CAP", 3)
    for _ in range(5):
        runqueue.submit(kind="test.echo", priority=12)
    runqueue.submit(kind="test.echo", priority=0)
    stats = {s.cls: s for s in dashboard.class_stats()}
    assert stats[PriorityClass.ASYNC].estimated == {"queued"}
    assert stats[PriorityClass.ASYNC].depth["queued"] >= 4
    interactive = stats[PriorityClass.INTERACTIVE]
    assert (interactive.depth, interactive.estimated) == ({"queued": 1}, set())
    staff("ike", "view_run")
    client = Client()
    assert client.login(username="ike", password=PASSWORD)
    html = client.get(DASHBOARD).content.decode()
    row = html[html.index('id="rq-classes"') :]
    assert "≈ " in row[: row.index("</table>")]
