"""The scheduled-work pages in a real browser (chromium, Playwright): a
schedule's page with Pause, Resume and Run now, pausing a kind from the
runs list, and a bulk requeue of every run a filter matches."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

import runqueue
from runqueue import leases, schedules, testing
from runqueue.db import db_now
from runqueue.models import EventLog, PausedKind, QueueEvent, Run, RunStatus, Schedule
from tests.browser.test_admin_browser import browser, page, playwright, screenshot  # noqa: F401
from tests.database.admin.test_admin_scheduled_work import failed_runs

pytestmark = pytest.mark.slow


def test_drive_a_schedule_page(page, tmp_path) -> None:  # noqa: F811
    now = db_now()
    start = now - dt.timedelta(hours=3)
    # The nightly schedule has no missed ticks (handled up to now), so the
    # tick below never fires it, whatever the time of day: its one run is
    # the Run now one.
    schedule = schedules.save_definition(
        Schedule(
            name="nightly-digest",
            cron="0 3 * * *",
            timezone="Europe/Paris",
            kind="test.echo",
            payload={"scope": "all"},
            handled_until=now,
        )
    )
    hourly = schedules.save_definition(
        Schedule(name="hourly-sync", cron="0 * * * *", kind="test.echo", handled_until=start)
    )
    schedules.tick()  # the hourly one has missed ticks: one fires, the rest are recorded
    page.goto(reverse("admin:index"))
    page.click("#runqueue-dashboard-link a:text('Schedules')")
    playwright.expect(page.locator("#result_list")).to_contain_text("At 03:00 every day")
    page.click("#result_list a:text('hourly-sync')")
    playwright.expect(page.locator(".field-in_words")).to_contain_text(
        "At the start of every hour (UTC)"
    )
    playwright.expect(page.locator(".rq-next-fires li")).to_have_count(3)
    playwright.expect(page.locator(".rq-ticks")).to_contain_text("fired")
    playwright.expect(page.locator(".rq-ticks")).to_contain_text("skipped every tick")
    playwright.expect(page.locator(".rq-ticks span.rq-status")).to_have_text("Queued")
    screenshot(page, "schedule-page", tmp_path)

    page.goto(reverse("admin:runqueue_schedule_change", args=[schedule.pk]))
    playwright.expect(page.locator(".field-in_words")).to_contain_text(
        "At 03:00 every day (Europe/Paris)"
    )
    page.click("#rq-pause")
    page.fill("#id_reason", "mail provider outage")
    page.click("input[type=submit][value='Yes, pause']")
    playwright.expect(page.locator(".messagelist")).to_contain_text(
        "Paused by staff:support: mail provider outage"
    )
    playwright.expect(page.locator(".field-state")).to_contain_text("Paused by staff:support")
    page.click("#rq-resume")
    page.click("input[type=submit][value='Yes, resume']")
    playwright.expect(page.locator(".field-state")).to_contain_text("Active")
    page.click("#rq-run-now")
    page.click("input[type=submit][value='Yes, run now']")
    playwright.expect(page.locator(".messagelist")).to_contain_text("Run now by staff:support")
    run = Run.objects.get(principal="schedule:nightly-digest")
    assert run.payload == {"scope": "all"}
    assert [
        e.type for e in QueueEvent.objects.filter(subject="nightly-digest").order_by("id")
    ] == [
        "schedule.paused",
        "schedule.resumed",
        "schedule.run_now",
    ]
    assert hourly.ticks.filter(outcome="fired").count() == 1


def test_pause_a_kind_from_the_runs_list(page, tmp_path) -> None:  # noqa: F811
    run = runqueue.submit(kind="test.echo").run
    page.goto(reverse("admin:runqueue_run_changelist"))
    page.check(f"input[name=_selected_action][value='{run.id}']")
    page.select_option("select[name=action]", "pause_kinds")
    page.click("button[name=index]")
    playwright.expect(page.locator("#rq-pause-kinds")).to_contain_text("test.echo")
    page.select_option("#id_priority_class", "0")
    page.fill("#id_reason", "handler bug, fix deploying")
    page.click("input[type=submit][value='Yes, pause']")
    playwright.expect(page.locator(".messagelist")).to_contain_text(
        "Paused test.echo (Interactive)."
    )
    page.goto(reverse("admin:index"))
    page.click("#runqueue-dashboard-link a:text('Paused kinds')")
    playwright.expect(page.locator("#result_list")).to_contain_text("handler bug, fix deploying")
    playwright.expect(page.locator("#result_list")).to_contain_text("staff:support")
    screenshot(page, "paused-kinds", tmp_path)
    row = PausedKind.objects.get()
    assert (row.kind, row.priority_class) == ("test.echo", 0)


def test_bulk_requeue_every_matching_run(page, tmp_path) -> None:  # noqa: F811
    matching = failed_runs(60, kind="test.echo")
    failed_runs(3, kind="k")
    page.goto(reverse("admin:runqueue_deadletteredrun_changelist") + "?kind=test.echo")
    playwright.expect(page.locator(".paginator")).to_contain_text("60 dead-lettered runs")
    page.click("a.rq-bulk-link:text('Requeue all matching')")
    playwright.expect(page.locator("#rq-bulk-count")).to_contain_text("60")
    page.fill("#id_typed_count", "60")
    page.fill("#id_reason", "provider is back")
    screenshot(page, "bulk-requeue", tmp_path)
    page.click("input[type=submit][value='Requeue all 60 matching']")
    # More than a page: a maintenance run does it; its page shows the progress.
    playwright.expect(page.locator(".messagelist")).to_contain_text(
        "60 run(s) will be requeued in the background"
    )
    background = Run.objects.get(kind="runqueue.bulk")
    lease = leases.claim_one("w-bulk")
    assert lease is not None and lease.run_id == background.id
    assert testing.execute(lease) == "succeeded"
    page.reload()
    playwright.expect(page.locator("body")).to_contain_text('"done": 60')
    screenshot(page, "bulk-requeue-progress", tmp_path)
    page.goto(reverse("admin:runqueue_deadletteredrun_changelist") + "?kind=test.echo")
    playwright.expect(page.locator(".paginator")).to_contain_text("0 dead-lettered runs")
    ids = [r.id for r in matching]
    assert set(Run.objects.filter(id__in=ids).values_list("status", flat=True)) == {
        RunStatus.QUEUED
    }
    assert Run.objects.filter(kind="k", status=RunStatus.FAILED).count() == 3
    assert EventLog.objects.filter(type="run.operator_requeued").count() == 60
