"""The admin console with Django's test client: who may see and do what,
each action and its two audit records, and the views' querysets."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

import runqueue
from runqueue import leases
from runqueue.models import EventLog, Run, ToolInvocation
from tests.admin_support import ALL_PERMS, PASSWORD, dead_lettered, staff, uncertain
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:runqueue_run_changelist")
DEAD = reverse("admin:runqueue_deadletteredrun_changelist")
UNCERTAIN = reverse("admin:runqueue_uncertainrun_changelist")
DASHBOARD = reverse("admin:runqueue_run_dashboard")


def login(username: str, *perms: str, is_staff: bool = True) -> Client:
    staff(username, *perms, is_staff=is_staff)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def action(client: Client, url: str, name: str, runs: list[Run], **extra: str):
    data = {"action": name, "_selected_action": [str(r.id) for r in runs], **extra}
    return client.post(url, data)


# -- who may reach what ------------------------------------------------------


def test_non_staff_and_anonymous_reach_nothing() -> None:
    """Every admin page of runqueue sends them to the login page."""
    run, tool = uncertain()
    urls = [
        RUNS,
        DEAD,
        UNCERTAIN,
        DASHBOARD,
        reverse("admin:runqueue_run_change", args=[run.id]),
        reverse("admin:runqueue_run_resolve", args=[tool.id]),
    ]
    for client in (Client(), login("visitor", *ALL_PERMS, is_staff=False)):
        for url in urls:
            response = client.get(url)
            assert response.status_code == 302, url
            assert response.url.startswith(reverse("admin:login")), url
        response = client.post(
            reverse("admin:runqueue_run_resolve", args=[tool.id]),
            {"happened": "yes", "note": "n"},
        )
        assert response.status_code == 302
    assert ToolInvocation.objects.get(id=tool.id).resolution is None


def test_staff_without_view_permission_is_refused() -> None:
    client = login("nobody")
    for url in (RUNS, DEAD, UNCERTAIN, DASHBOARD):
        assert client.get(url).status_code == 403, url


def test_view_only_staff_see_but_cannot_act() -> None:
    """Actions are not offered, a direct POST is refused, no resolve links."""
    run = dead_lettered()
    _, tool = uncertain()
    client = login("viewer", "view_run")

    page = client.get(DEAD)
    assert page.status_code == 200
    assert str(run.id) in page.content.decode()
    assert "requeue_runs" not in page.content.decode()
    assert "cancel_runs" not in client.get(RUNS).content.decode()

    response = action(client, DEAD, "requeue_runs", [run], confirm="yes")
    assert response.status_code == 200  # the changelist again, nothing done
    assert Run.objects.get(id=run.id).status == "failed"
    assert not EventLog.objects.filter(run_id=run.id, type="run.operator_requeued").exists()

    listing = client.get(UNCERTAIN).content.decode()
    assert "charge_card #0" in listing and "rq-resolve" not in listing
    resolve = reverse("admin:runqueue_run_resolve", args=[tool.id])
    assert client.get(resolve).status_code == 403
    assert client.post(resolve, {"happened": "yes", "note": "x"}).status_code == 403
    assert ToolInvocation.objects.get(id=tool.id).resolution is None


def test_runs_cannot_be_added_edited_or_deleted() -> None:
    run = dead_lettered()
    client = login("root", *ALL_PERMS)
    change = reverse("admin:runqueue_run_change", args=[run.id])
    assert client.get(reverse("admin:runqueue_run_add")).status_code == 403
    assert client.get(reverse("admin:runqueue_run_delete", args=[run.id])).status_code == 403
    response = client.post(change, {"status": "queued", "lease_epoch": 99})
    assert response.status_code == 403
    assert "delete_selected" not in client.get(RUNS).content.decode()
    run.refresh_from_db()
    assert (run.status, run.lease_epoch) == ("failed", 1)


# -- requeue -------------------------------------------------------------------


def test_requeue_confirms_then_requeues_with_both_audit_records() -> None:
    run = dead_lettered()
    client = login("ann", "view_run", "requeue_run")

    confirm = action(client, DEAD, "requeue_runs", [run])
    assert confirm.status_code == 200
    assert "Requeue 1 run(s)?" in confirm.content.decode()
    assert Run.objects.get(id=run.id).status == "failed"  # nothing yet

    done = action(client, DEAD, "requeue_runs", [run], confirm="yes", reason="provider fixed")
    assert done.status_code == 302
    assert messages_of(done) == ["Requeued 1 run(s)."]
    run.refresh_from_db()
    assert (run.status, run.attempts, run.failure) == ("queued", 0, None)
    event = EventLog.objects.get(run_id=run.id, type="run.operator_requeued")
    assert event.data["actor"] == "staff:ann"
    assert event.data["reason"] == "provider fixed"
    entry = LogEntry.objects.get(object_id=str(run.id))
    assert entry.user.username == "ann"
    assert entry.action_flag == CHANGE
    assert entry.change_message == "Requeued by staff:ann: provider fixed"
    assert entry.content_type.model_class() is Run


def test_requeue_confirmation_shows_the_failure_and_warns_when_it_is_permanent() -> None:
    run = dead_lettered(message="card declined")
    client = login("ann", "view_run", "requeue_run")
    page = action(client, DEAD, "requeue_runs", [run]).content.decode()
    assert "ValueError: card declined" in page
    assert "<code>permanent</code>" in page
    assert '<td class="rq-attempts">1 of 3</td>' in page
    assert "1 of these run(s) failed permanently." in page
    assert "runs the same handler code on the same input" in page


def test_requeue_confirmation_does_not_warn_for_a_lease_expiry() -> None:
    run = runqueue.submit(kind="test.echo", max_attempts=1).run
    assert leases.claim_one("w-lost").run_id == run.id
    expire_lease(run.id)
    leases.sweep()
    assert Run.objects.get(id=run.id).failure["classification"] == "lease_expired"
    client = login("ann", "view_run", "requeue_run")
    page = action(client, DEAD, "requeue_runs", [run]).content.decode()
    assert "LeaseExpired: lease expired on attempt 1 of 1" in page
    assert "stopped renewing the lease" in page
    assert "failed permanently" not in page and "rq-requeue-warning" not in page


def test_requeue_when_the_session_has_an_active_run_says_so() -> None:
    run = dead_lettered(session_id="conv-7")
    other = runqueue.submit(kind="test.echo", session_id="conv-7").run
    client = login("ann", "view_run", "requeue_run")

    done = action(client, DEAD, "requeue_runs", [run], confirm="yes")
    assert messages_of(done) == [
        f"Run {run.id} was not requeued: its session 'conv-7' already has an active run "
        f"{other.id} (queued). Finish or cancel that run first."
    ]
    assert Run.objects.get(id=run.id).status == "failed"
    assert not LogEntry.objects.exists()


def test_requeue_of_a_run_that_is_not_dead_lettered_is_refused() -> None:
    queued = runqueue.submit(kind="test.echo").run
    client = login("ann", "view_run", "requeue_run")
    done = action(client, RUNS, "requeue_runs", [queued], confirm="yes")
    assert messages_of(done) == [f"Run {queued.id} was not requeued: it is queued."]
    assert not LogEntry.objects.exists()


def test_an_action_refuses_more_runs_than_its_cap() -> None:
    from runqueue.admin.actions import MAX_ACTION_RUNS

    runs = [runqueue.submit(kind="test.echo").run for _ in range(MAX_ACTION_RUNS + 1)]
    client = login("ann", "view_run", "cancel_run")
    done = action(client, RUNS, "cancel_runs", runs, confirm="yes", reason="r")
    assert messages_of(done) == [
        f"Select at most {MAX_ACTION_RUNS} runs to cancel; narrow the filters."
    ]
    assert not Run.objects.filter(status="cancelled").exists()


# -- cancel --------------------------------------------------------------------


def test_cancel_needs_a_reason_and_fences_the_running_worker() -> None:
    sub = runqueue.submit(kind="test.echo")
    lease = leases.claim_one("w-live")
    assert lease.run_id == sub.run.id
    client = login("bob", "view_run", "cancel_run")

    again = action(client, RUNS, "cancel_runs", [sub.run], confirm="yes", reason=" ")
    assert again.status_code == 200
    assert "A reason is required." in again.content.decode()
    assert Run.objects.get(id=sub.run.id).status == "running"

    done = action(client, RUNS, "cancel_runs", [sub.run], confirm="yes", reason="user left")
    assert messages_of(done) == ["Cancelled 1 run(s)."]
    run = Run.objects.get(id=sub.run.id)
    assert run.status == "cancelled" and run.lease_epoch == lease.epoch + 1
    assert leases.heartbeat(lease) is False  # the live worker is fenced
    event = EventLog.objects.get(run_id=run.id, type="run.cancelled")
    assert event.data == {"actor": "staff:bob", "reason": "user left"}
    entry = LogEntry.objects.get(object_id=str(run.id))
    assert entry.change_message == "Cancelled by staff:bob: user left"


def test_cancel_of_a_finished_run_is_refused() -> None:
    run = dead_lettered()
    client = login("bob", "view_run", "cancel_run")
    done = action(client, RUNS, "cancel_runs", [run], confirm="yes", reason="r")
    assert messages_of(done) == [f"Run {run.id} was not cancelled: it is failed."]
    assert not LogEntry.objects.exists()


# -- resolve uncertain --------------------------------------------------------------


def test_resolve_uncertain_records_the_answer_and_both_audit_records() -> None:
    run, tool = uncertain()
    client = login("cy", "view_run", "resolve_uncertain")
    url = reverse("admin:runqueue_run_resolve", args=[tool.id])

    listing = client.get(UNCERTAIN).content.decode()
    assert url in listing
    form = client.get(url)
    assert form.status_code == 200
    assert "charge_card" in form.content.decode() and "1299" in form.content.decode()

    invalid = client.post(url, {"happened": "yes", "note": ""})
    assert invalid.status_code == 200
    assert "This field is required." in invalid.content.decode()
    assert ToolInvocation.objects.get(id=tool.id).resolution is None

    done = client.post(url, {"happened": "no", "note": "no charge in the PSP"})
    assert done.status_code == 302 and done.url == UNCERTAIN
    assert messages_of(done) == [f"Recorded: charge_card #0 of run {run.id} did not happen."]
    tool.refresh_from_db()
    assert tool.resolution["happened"] is False
    assert tool.resolution["actor"] == "staff:cy"
    event = EventLog.objects.get(run_id=run.id, type="tool.resolved")
    assert event.data["actor"] == "staff:cy" and event.data["note"] == "no charge in the PSP"
    entry = LogEntry.objects.get(object_id=str(run.id))
    assert entry.change_message == (
        "Resolved uncertain charge_card #0 as 'did not happen' by staff:cy: no charge in the PSP"
    )
    assert not Run.objects.uncertain().filter(id=run.id).exists()

    twice = client.post(url, {"happened": "yes", "note": "again"})
    assert messages_of(twice)[-1].endswith(
        "is not awaiting an answer (already resolved, or not uncertain)."
    )
    assert LogEntry.objects.count() == 1


def test_admin_posts_need_a_csrf_token() -> None:
    run, tool = uncertain()
    staff("dee", "view_run", "resolve_uncertain", "requeue_run")
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="dee", password=PASSWORD)
    url = reverse("admin:runqueue_run_resolve", args=[tool.id])
    assert client.post(url, {"happened": "yes", "note": "x"}).status_code == 403
    assert ToolInvocation.objects.get(id=tool.id).resolution is None


# -- querysets, filters, search -------------------------------------------------


def test_each_view_lists_its_runs() -> None:
    failed = dead_lettered()
    unsure, _ = uncertain()
    queued = runqueue.submit(kind="test.echo").run
    client = login("eve", "view_run")

    def listed(url: str, query: str = "") -> set[str]:
        response = client.get(url + query)
        assert response.status_code == 200
        return {str(r.id) for r in response.context["cl"].result_list}

    assert listed(RUNS) == {str(failed.id), str(unsure.id), str(queued.id)}
    assert listed(DEAD) == {str(failed.id)}
    assert listed(UNCERTAIN) == {str(unsure.id)}
    assert listed(RUNS, "?status__exact=queued") == {str(queued.id)}
    assert listed(RUNS, "?kind=test.pay") == {str(unsure.id)}


def test_the_tenant_filter_offers_the_first_tenants_of_history_and_backlog() -> None:
    """The choices (``admin_tenants``: a skip scan of the tenant index over
    every partition) are the first TENANT_CHOICES tenants in order, whether
    their runs are finished or live, each once."""
    from django.db import connection

    from runqueue.admin.filters import TENANT_CHOICES
    from runqueue.sql import execute
    from tests.database.factories import RunFactory

    finished = [f"t{n:03d}" for n in range(0, 2 * TENANT_CHOICES, 2)]
    live = [f"t{n:03d}" for n in range(1, 2 * TENANT_CHOICES, 4)]
    for tenant in finished:
        RunFactory(tenant=tenant, finished=True)
    for tenant in live + finished[:3]:
        RunFactory(tenant=tenant)
    with connection.cursor() as cursor:
        got = [row[0] for row in execute(cursor, "admin_tenants", {"limit": TENANT_CHOICES})]
    assert got == sorted(set(finished) | set(live))[:TENANT_CHOICES]


def test_filters_by_class_tenant_and_search() -> None:
    fast = runqueue.submit(kind="test.echo", priority=3, tenant="acme", session_id="s-1").run
    slow = runqueue.submit(kind="test.echo", priority=12, principal="user:9").run
    chores = runqueue.submit(kind="test.echo", priority=25).run
    client = login("eve", "view_run")

    def listed(query: str) -> set:
        return {r.id for r in client.get(RUNS + query).context["cl"].result_list}

    assert listed("?class=0") == {fast.id}
    assert listed("?class=10") == {slow.id}
    assert listed("?class=20") == {chores.id}
    assert listed("?tenant=acme") == {fast.id}
    assert "acme" in client.get(RUNS).content.decode()  # offered by the tenant filter
    assert listed("?q=s-1") == {fast.id}
    assert listed("?q=user:9") == {slow.id}
    assert listed(f"?q={chores.id}") == {chores.id}
    assert listed("?q=acme") == {fast.id}
    assert listed("?q=nothing-like-this") == set()
    # A term two fields hold (the probe finds both): the runs of either.
    both = runqueue.submit(kind="test.echo", tenant="user:9").run
    assert listed("?q=user:9") == {slow.id, both.id}


def test_the_run_page_shows_timeline_tools_checkpoints_and_failure(
    django_assert_max_num_queries,
) -> None:
    run, tool = uncertain()
    broken = dead_lettered(message="<script>alert(1)</script> declined")
    client = login("fay", "view_run", "resolve_uncertain")

    # 15, and the set_config of a page planned without JIT (guard.read).
    with django_assert_max_num_queries(16):
        page = client.get(reverse("admin:runqueue_run_change", args=[run.id]))
    html = page.content.decode()
    assert page.status_code == 200
    for event_type in ("run.created", "run.claimed", "tool.started", "tool.uncertain"):
        assert f"<code>{event_type}</code>" in html
    assert 'class="rq-tool rq-uncertain"' in html
    assert reverse("admin:runqueue_run_resolve", args=[tool.id]) in html
    assert "charging" in html  # the checkpoint's state

    failure = client.get(reverse("admin:runqueue_run_change", args=[broken.id])).content.decode()
    assert '<pre class="rq-traceback"' in failure
    assert "Traceback (most recent call last)" in failure or "ValueError" in failure
    assert "&lt;script&gt;alert(1)&lt;/script&gt; declined" in failure
    assert "<script>alert(1)</script>" not in failure


def test_changelists_never_count_every_run(django_assert_max_num_queries) -> None:
    """Counts are capped with a LIMIT inside; the query count does not grow with rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(30):
        dead_lettered()
    client = login("gus", "view_run", "requeue_run", "cancel_run")
    for url in (RUNS, DEAD, UNCERTAIN, RUNS + "?status__exact=failed&class=0"):
        with CaptureQueriesContext(connection) as ctx, django_assert_max_num_queries(12):
            assert client.get(url).status_code == 200
        counts = [q["sql"] for q in ctx.captured_queries if "COUNT(" in q["sql"].upper()]
        assert counts, url
        assert all("LIMIT" in sql for sql in counts), counts


def test_the_count_is_capped_and_the_page_says_so(monkeypatch) -> None:
    from runqueue.admin import pagination

    monkeypatch.setattr(pagination.CappedCountPaginator, "cap", 3)
    monkeypatch.setattr(pagination, "COUNT_CAP", 3)
    for _ in range(5):
        runqueue.submit(kind="test.echo")
    client = login("hal", "view_run")
    html = client.get(RUNS).content.decode()
    assert "more than 3 runs (narrow the filters to see the rest)" in html


# -- uncertain runs are marked everywhere ---------------------------------------


def row_of(page: str, run: Run) -> str:
    """The changelist row (its <tr>) that lists this run."""
    # Its checkbox, or its link where the list has no actions (uncertain runs).
    rows = [
        row
        for row in page.split("<tr")
        if f'value="{run.id}"' in row or f"/{run.id}/change/" in row
    ]
    assert len(rows) == 1, run.id
    return rows[0]


def test_uncertain_runs_are_marked_in_every_list() -> None:
    succeeded, _ = uncertain()
    failed, _ = uncertain(payload={"then_fail": True})
    plain_failed = dead_lettered()
    plain = runqueue.submit(kind="test.echo").run
    assert (succeeded.status, failed.status) == ("succeeded", "failed")
    client = login("ann", "view_run", "requeue_run", "cancel_run")
    for url, marked, unmarked in (
        (RUNS, [succeeded, failed], [plain_failed, plain]),
        (DEAD, [failed], [plain_failed]),
        (UNCERTAIN, [succeeded, failed], []),
    ):
        page = client.get(url).content.decode()
        for run in marked:
            assert "rq-uncertain-marker" in row_of(page, run), (url, run.status)
        for run in unmarked:
            assert "rq-uncertain-marker" not in row_of(page, run), (url, run.status)
    # Resolved: the marker goes.
    tool = succeeded.tool_invocations.get()
    leases.resolve_uncertain(tool.id, happened=False, note="not in the ledger", actor="staff:ann")
    assert "rq-uncertain-marker" not in row_of(client.get(RUNS).content.decode(), succeeded)


def test_the_run_page_header_marks_uncertain_and_the_tool_table_shows_arguments_and_error() -> (
    None
):
    run, _tool = uncertain()
    client = login("ann", "view_run")
    page = client.get(reverse("admin:runqueue_run_change", args=[run.id])).content.decode()
    header = page.split('class="rq-run-header"', 1)[1].split("</div>", 1)[0]
    assert "rq-uncertain-marker" in header
    assert "1 tool invocation(s) of this run may or may not have happened" in header
    tools = page.split('class="rq-tools"', 1)[1].split("</table>", 1)[0]
    assert "&quot;cents&quot;: 1299" in tools
    assert "timed out after the request was sent" in tools

    plain = dead_lettered()
    page = client.get(reverse("admin:runqueue_run_change", args=[plain.id])).content.decode()
    assert 'class="rq-run-header"' in page
    assert "rq-uncertain-marker" not in page and "rq-uncertain-banner" not in page


def test_long_values_are_shortened_with_the_whole_value_in_a_title() -> None:
    session = "conversation-" + "x" * 60
    tenant = "acme-corporation-europe-middle-east-africa"
    kind = "test.customer-support.refund-negotiation-with-escalation"
    run = runqueue.submit(kind=kind, session_id=session, tenant=tenant).run
    client = login("ann", "view_run", "cancel_run")
    row = row_of(client.get(RUNS).content.decode(), run)
    for value in (session, tenant, kind):
        assert f'title="{value}"' in row
        assert f">{value}<" not in row
    cells = row.split("<td")  # [checkbox, ...] with the id in a <th> before the status
    assert "field-short_id" in cells[1] and "field-status_display" in cells[2]


def test_the_uncertain_list_offers_no_cancel_and_workers_and_tokens_no_delete(
    admin_client,
) -> None:
    """Issue 26: Cancel was offered on the uncertain list, bulk delete on
    workers and tokens."""
    uncertain()
    page = admin_client.get(UNCERTAIN).content.decode()
    assert "cancel_runs" not in page and "Cancel all matching" not in page
    for url in ("/admin/runqueue/worker/", "/admin/runqueue/apitoken/"):
        assert "delete_selected" not in admin_client.get(url).content.decode(), url


def test_the_resolve_page_does_not_promise_a_finished_run_sees_the_answer(admin_client) -> None:
    run, tool = uncertain()
    assert run.status == "succeeded"
    page = admin_client.get(reverse("admin:runqueue_run_resolve", args=[tool.pk])).content
    text = page.decode()
    assert "handler sees your answer" not in text
    assert "its handler will not run again unless it is requeued" in text


def test_the_token_created_page_has_the_admins_breadcrumbs(admin_client, admin_user) -> None:
    response = admin_client.post(
        "/admin/runqueue/apitoken/add/",
        {
            "name": "ci",
            "user": admin_user.pk,
            "tenant": "acme",
            "max_priority_class": 10,
            "submit_quota": 60,
            "submit_window_seconds": 60,
        },
    )
    assert '<ol class="breadcrumbs">' in response.content.decode()


# -- pause one run ---------------------------------------------------------------


def test_pause_and_resume_runs_from_the_list() -> None:
    runs = [runqueue.submit(kind="test.echo").run for _ in range(2)]
    client = login("pat", "view_run", "pause_kind")
    done = action(client, RUNS, "pause_runs", runs, confirm="yes", reason="vendor outage")
    assert messages_of(done) == ["Paused 2 run(s)."]
    assert Run.objects.filter(paused_at__isnull=False).count() == 2
    assert leases.claim_one("w") is None
    listed = client.get(RUNS, {"paused": "yes"}).content.decode()
    assert all(str(run.id)[:8] in listed for run in runs)
    done = action(client, RUNS, "resume_runs", runs[:1], confirm="yes")
    assert messages_of(done) == ["Resumed 1 run(s)."]
    assert leases.claim_one("w").run_id == runs[0].id
    assert LogEntry.objects.filter(change_message__startswith="Paused by staff:pat").count() == 2


def test_pause_needs_its_permission() -> None:
    runqueue.submit(kind="test.echo")
    client = login("vic", "view_run", "cancel_run")
    assert "pause_runs" not in client.get(RUNS).content.decode()


def test_a_lists_checkbox_is_djangos(admin_client) -> None:
    """The row checkbox is written directly (no widget template): the same
    HTML as Django's (the name its actions read, the run's label), on the
    list."""
    from django.contrib import admin

    run = runqueue.submit(kind="test.echo").run
    model_admin = admin.site._registry[Run]
    box = model_admin.action_checkbox(run)
    assert box == admin.ModelAdmin.action_checkbox(model_admin, run)
    html = admin_client.get(reverse("admin:runqueue_run_changelist")).content.decode()
    assert str(box) in html
