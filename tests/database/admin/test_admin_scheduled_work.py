"""The admin's scheduled-work pages with Django's test client: bulk actions
on every run a filter matches, pausing kinds, and the schedule pages."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils import timezone

import runqueue
from runqueue import leases, schedules, testing
from runqueue.models import (
    EventLog,
    PausedKind,
    PriorityClass,
    QueueEvent,
    Run,
    RunStatus,
    Schedule,
)
from tests.admin_support import ALL_PERMS
from tests.database.admin.test_admin import DEAD, RUNS, login, messages_of

pytestmark = pytest.mark.django_db


def failed_runs(n: int, kind: str = "test.echo", **fields) -> list[Run]:
    """Dead-lettered runs, written directly: the fixture, not the system under test."""
    now = timezone.now()
    return Run.objects.bulk_create(
        [
            Run(
                kind=kind,
                status=RunStatus.FAILED,
                attempts=1,
                lease_epoch=1,
                finished_at=now,
                failure={"classification": "permanent", "error_type": "E", "message": "m"},
                **fields,
            )
            for _ in range(n)
        ]
    )


# -- bulk actions ------------------------------------------------------------------


def test_bulk_requeue_acts_on_every_matching_run_beyond_the_page() -> None:
    """60 dead-lettered runs of one kind (the list shows 50 a page), 5 of
    another, and one whose session is busy: typed confirmation, then 59
    requeued through the service, each audited, the busy one reported."""
    matching = failed_runs(59, kind="test.echo")
    others = failed_runs(5, kind="k")
    busy = failed_runs(1, kind="test.echo", session_id="conv-1")[0]
    runqueue.submit(kind="k", session_id="conv-1")  # the session's active run
    client = login("ann", *ALL_PERMS)
    listing = client.get(DEAD + "?kind=test.echo").content.decode()
    bulk_url = reverse("admin:runqueue_deadletteredrun_bulk", args=["requeue"]) + "?kind=test.echo"
    assert f'href="{bulk_url}"' in listing
    assert "Cancel all matching" not in listing  # not offered on the dead letter

    page = client.get(bulk_url).content.decode()
    assert "<strong>60</strong> dead-lettered run(s) match these filters" in page
    assert 'value="Requeue all 60 matching"' in page

    wrong = client.post(bulk_url, {"typed_count": "50", "reason": "provider back"})
    assert "Type 60 to confirm" in wrong.content.decode()
    assert Run.objects.filter(status=RunStatus.QUEUED, kind="test.echo").count() == 0

    # More than a page (50): a maintenance run does it, not the request.
    done = client.post(bulk_url, {"typed_count": "60", "reason": "provider back"})
    background = Run.objects.get(kind="runqueue.bulk")
    assert done.status_code == 302
    assert done.url == reverse("admin:runqueue_run_change", args=[background.pk])
    assert any("60 run(s) will be requeued in the background" in n for n in messages_of(done))
    assert background.priority_class == PriorityClass.MAINTENANCE
    assert Run.objects.filter(status=RunStatus.QUEUED, kind="test.echo").count() == 0
    lease = leases.claim_one("w-bulk", [PriorityClass.MAINTENANCE])
    assert lease is not None and lease.run_id == background.id
    assert testing.execute(lease) == "succeeded"
    summary = Run.objects.get(id=background.id).result
    assert (summary["of"], summary["done"], summary["refused"]) == (60, 59, 1)
    assert str(busy.id) in summary["refusals"][0] and "conv-1" in summary["refusals"][0]
    progress = EventLog.objects.filter(run_id=background.id, type="progress")
    assert progress.count() == 1 and progress.get().data["done"] == 59
    page = client.get(done.url).content.decode()
    assert "&quot;done&quot;: 59" in page  # the checkpoint: progress in the console
    requeued = Run.objects.filter(id__in=[r.id for r in matching])
    assert set(requeued.values_list("status", flat=True)) == {RunStatus.QUEUED}
    assert Run.objects.get(id=busy.id).status == RunStatus.FAILED
    assert set(
        Run.objects.filter(id__in=[r.id for r in others]).values_list("status", flat=True)
    ) == {RunStatus.FAILED}
    events = EventLog.objects.filter(type="run.operator_requeued")
    assert events.count() == 59 and {e.data["actor"] for e in events} == {"staff:ann"}
    assert (
        LogEntry.objects.filter(
            change_message__startswith=f"Requeued (bulk, run {background.id}) by staff:ann",
            user__username="ann",
        ).count()
        == 59
    )


def test_bulk_requeue_warns_when_matches_failed_permanently() -> None:
    """Issue 26: the single run's page warned, "Requeue all matching" did not."""
    failed_runs(3, kind="test.echo")
    transient = failed_runs(2, kind="k")
    Run.objects.filter(id__in=[r.id for r in transient]).update(
        failure={"classification": "transient", "error_type": "E", "message": "m"}
    )
    client = login("ann", *ALL_PERMS)
    url = reverse("admin:runqueue_deadletteredrun_bulk", args=["requeue"])
    page = client.get(url).content.decode()
    assert "rq-requeue-warning" in page
    assert "3 of these run(s) failed permanently." in page
    assert "will fail the same way" in page
    only_transient = client.get(url + "?kind=k").content.decode()
    assert "<strong>2</strong> dead-lettered run(s)" in only_transient
    assert "rq-requeue-warning" not in only_transient


def test_bulk_cancel_needs_a_reason_and_only_counts_what_it_can_cancel() -> None:
    queued = [runqueue.submit(kind="k", tenant="acme").run for _ in range(3)]
    failed_runs(2, kind="k", tenant="acme")
    runqueue.submit(kind="k", tenant="other")
    client = login("ann", *ALL_PERMS)
    url = reverse("admin:runqueue_run_bulk", args=["cancel"]) + "?tenant=acme"
    assert (
        "<strong>3</strong> queued, running or waiting run(s)" in client.get(url).content.decode()
    )
    no_reason = client.post(url, {"typed_count": "3", "reason": ""})
    assert "A reason is required." in no_reason.content.decode()
    client.post(url, {"typed_count": "3", "reason": "tenant offboarded"})
    assert set(
        Run.objects.filter(id__in=[r.id for r in queued]).values_list("status", flat=True)
    ) == {RunStatus.CANCELLED}
    assert Run.objects.filter(tenant="other", status=RunStatus.QUEUED).count() == 1


def test_bulk_actions_need_the_permission_and_respect_the_cap(monkeypatch) -> None:
    from runqueue.admin import pagination

    failed_runs(4)
    viewer = login("viewer", "view_run")
    assert "rq-bulk-link" not in viewer.get(DEAD).content.decode()
    url = reverse("admin:runqueue_deadletteredrun_bulk", args=["requeue"])
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"typed_count": "4"}).status_code == 403
    monkeypatch.setattr(pagination, "COUNT_CAP", 3)
    client = login("ann", *ALL_PERMS)
    assert "More than 3 runs match" in client.get(url).content.decode()
    assert "narrow the filters" in client.post(url, {"typed_count": "4"}).content.decode()
    assert Run.objects.filter(status=RunStatus.QUEUED).count() == 0


# -- pausing kinds -----------------------------------------------------------------


def test_pause_the_kinds_of_selected_runs_then_resume_from_the_paused_page() -> None:
    run = runqueue.submit(kind="test.echo").run
    client = login("ann", *ALL_PERMS)
    data = {"action": "pause_kinds", "_selected_action": [str(run.id)]}
    confirm = client.post(RUNS, data)
    assert "Pause 1 kind(s)?" in confirm.content.decode()
    done = client.post(
        RUNS, data | {"confirm": "yes", "reason": "provider outage", "priority_class": "10"}
    )
    assert "Paused test.echo (Async)." in messages_of(done)
    row = PausedKind.objects.get()
    assert (row.kind, row.priority_class, row.paused_by) == ("test.echo", 10, "staff:ann")
    paused_page = client.get(reverse("admin:runqueue_pausedkind_changelist")).content.decode()
    assert (
        "test.echo" in paused_page
        and "provider outage" in paused_page
        and "staff:ann" in paused_page
    )
    resume = {"action": "resume_kinds", "_selected_action": [str(row.pk)]}
    client.post(reverse("admin:runqueue_pausedkind_changelist"), resume)
    assert not PausedKind.objects.exists()
    assert list(QueueEvent.objects.order_by("id").values_list("type", flat=True)) == [
        "kind.paused",
        "kind.resumed",
    ]
    assert LogEntry.objects.filter(change_message="Resumed by staff:ann").exists()


def test_pausing_needs_its_permission() -> None:
    run = runqueue.submit(kind="test.echo").run
    client = login("bob", "view_run", "cancel_run")
    assert "pause_kinds" not in client.get(RUNS).content.decode()
    data = {
        "action": "pause_kinds",
        "_selected_action": [str(run.id)],
        "confirm": "yes",
        "reason": "r",
    }
    client.post(RUNS, data)
    assert not PausedKind.objects.exists()
    assert client.get(reverse("admin:runqueue_pausedkind_add")).status_code == 403


def test_the_paused_page_pauses_a_kind_through_the_service() -> None:
    client = login("ann", *ALL_PERMS)
    add = reverse("admin:runqueue_pausedkind_add")
    client.post(add, {"kind": "test.echo", "priority_class": "", "reason": "incident 42"})
    row = PausedKind.objects.get()
    assert (row.priority_class, row.paused_by, row.reason) == (None, "staff:ann", "incident 42")
    assert QueueEvent.objects.get().type == "kind.paused"


# -- schedules ------------------------------------------------------------------------


def add_schedule(client, **fields):
    data = {
        "name": "nightly",
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "kind": "test.echo",
        "payload": '{"scope": "all"}',
        "priority": "20",
        "tenant": "default",
        "max_attempts": "",
        "catch_up": "latest",
        "catch_up_limit": "10",
        "overlap": "skip",
    } | fields
    return client.post(reverse("admin:runqueue_schedule_add"), data)


def test_a_schedule_is_added_in_the_admin_with_clear_errors() -> None:
    client = login("ann", *ALL_PERMS)
    bad = add_schedule(client, cron="0 3 * *", timezone="Paris")
    html = bad.content.decode()
    assert "has 4 fields; a cron expression has five" in html
    assert "unknown time zone" in html and not Schedule.objects.exists()
    assert add_schedule(client).status_code == 302
    schedule = Schedule.objects.get()
    assert schedule.source == "admin" and schedule.next_fire_at > schedule.handled_until
    page = client.get(
        reverse("admin:runqueue_schedule_change", args=[schedule.pk])
    ).content.decode()
    assert "At 03:00 every day (Europe/Paris)" in page
    assert page.count("03:00 CE") == 3  # three next fire times, CET or CEST
    assert "No tick yet." in page
    for op in ("pause", "run_now"):
        assert reverse(f"admin:runqueue_schedule_{op}", args=[schedule.pk]) in page


def test_a_schedule_whose_runs_submit_refuses_is_refused_in_the_form(settings) -> None:
    """The form checks the runs by submit's rules: a payload over the size
    limit would otherwise fail at every tick."""
    settings.RUNQUEUE = {**settings.RUNQUEUE, "MAX_PAYLOAD_BYTES": 64}
    client = login("ann", *ALL_PERMS)
    big = add_schedule(client, payload='{"text": "%s"}' % ("x" * 100))
    assert "payload is 112 bytes as JSON, over the 64-byte limit" in big.content.decode()
    assert not Schedule.objects.exists()
    assert add_schedule(client).status_code == 302


def test_pause_resume_and_run_now_are_confirmed_and_audited() -> None:
    client = login("ann", *ALL_PERMS)
    add_schedule(client)
    schedule = Schedule.objects.get()
    pause = reverse("admin:runqueue_schedule_pause", args=[schedule.pk])
    assert "A reason is required." in client.post(pause, {"reason": ""}).content.decode()
    client.post(pause, {"reason": "provider outage"})
    schedule.refresh_from_db()
    assert schedule.paused_by == "staff:ann" and schedule.pause_reason == "provider outage"
    client.post(reverse("admin:runqueue_schedule_resume", args=[schedule.pk]), {"reason": ""})
    run_now = reverse("admin:runqueue_schedule_run_now", args=[schedule.pk])
    token = client.get(run_now).context["token"]
    client.post(run_now, {"token": token})
    again = client.post(run_now, {"token": token})  # a double click
    run = Run.objects.get()
    assert f"Already submitted: run {run.id}." in messages_of(again)
    assert run.principal == "schedule:nightly" and run.payload == {"scope": "all"}
    assert list(QueueEvent.objects.order_by("id").values_list("type", flat=True)) == [
        "schedule.paused",
        "schedule.resumed",
        "schedule.run_now",
    ]
    changes = LogEntry.objects.filter(action_flag=CHANGE).order_by("id")
    messages = list(changes.values_list("change_message", flat=True))
    assert messages == [
        "Paused by staff:ann: provider outage",
        "Resumed by staff:ann",
        f"Run now by staff:ann: run {run.id}",
    ]
    page = client.get(
        reverse("admin:runqueue_schedule_change", args=[schedule.pk])
    ).content.decode()
    # Issue 26: "Last runs" left the Run now run out.
    assert "No tick yet." not in page
    assert "<td>run now</td>" in page
    assert reverse("admin:runqueue_run_change", args=[run.pk]) in page
    viewer = login("viewer", "view_run")
    assert viewer.post(pause, {"reason": "x"}).status_code == 403
    assert (
        "rq-run-now"
        not in viewer.get(
            reverse("admin:runqueue_schedule_change", args=[schedule.pk])
        ).content.decode()
    )


def test_the_schedule_page_lists_its_last_runs_with_their_status() -> None:
    start = dt.datetime(2026, 5, 4, 12, 0, 30, tzinfo=dt.UTC)
    schedule = schedules.save_definition(
        Schedule(name="hourly", cron="0 * * * *", kind="test.echo", handled_until=start)
    )
    schedules.tick(now=start + dt.timedelta(hours=3))
    client = login("ann", "view_run")
    page = client.get(
        reverse("admin:runqueue_schedule_change", args=[schedule.pk])
    ).content.decode()
    run = Run.objects.get()
    assert str(run.id)[:8] in page and "Queued" in page
    assert "skipped every tick from here up to 2026-05-04 15:00 UTC" in page


def test_settings_schedules_are_read_only_and_their_names_taken(settings) -> None:
    settings.RUNQUEUE = {"SCHEDULES": {"nightly": {"cron": "0 3 * * *", "kind": "test.echo"}}}
    client = login("ann", *ALL_PERMS, "delete_schedule")
    listing = client.get(reverse("admin:runqueue_schedule_changelist")).content.decode()
    assert "nightly" in listing and "At 03:00 every day" in listing
    schedule = Schedule.objects.get(name="nightly")
    change = reverse("admin:runqueue_schedule_change", args=[schedule.pk])
    client.post(change, {"cron": "* * * * *"})
    assert Schedule.objects.get(pk=schedule.pk).cron == "0 3 * * *"
    assert (
        client.get(reverse("admin:runqueue_schedule_delete", args=[schedule.pk])).status_code
        == 403
    )
    taken = add_schedule(client, name="nightly").content.decode()
    assert "defined in RUNQUEUE[&#x27;SCHEDULES&#x27;], which wins" in taken
