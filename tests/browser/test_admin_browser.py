"""The admin console in a real browser: Debian's chromium, headless, driven
by Playwright against a live server, at 1366x900 (a support agent's laptop).
Screenshots are saved as artifacts in ``test-artifacts/`` (and the test's tmp
folder)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

import runqueue
from runqueue.models import EventLog, Run, RunEvent, ToolInvocation
from tests.admin_support import ALL_PERMS, PASSWORD, dead_lettered, staff, uncertain

#: The screen the console must fit without a horizontal scroll.
VIEWPORT = {"width": 1366, "height": 900}

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--headless",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser(django_db_setup: None) -> Iterator[object]:
    """One chromium for the module. Playwright's sync API keeps an event loop
    running in this thread while it is open, so the tests' own ORM calls need
    Django's async-unsafe opt-in, for this module only (the test database is
    set up before, and the live server's requests run in its own thread)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it with apt-get")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    with pytest.MonkeyPatch.context() as mp, playwright.sync_playwright() as pw:
        mp.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server) -> Iterator[object]:
    """A page logged in as support staff holding every runqueue permission."""
    staff("support", *ALL_PERMS)
    context = browser.new_context(base_url=live_server.url, viewport=VIEWPORT)
    page = context.new_page()
    page.goto(reverse("admin:login"))
    page.fill("#id_username", "support")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    playwright.expect(page.locator("#user-tools")).to_contain_text("support")
    yield page
    context.close()


def screenshot(page, name: str, tmp_path: Path) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    shutil.copy(path, tmp_path / path.name)
    return path


def test_requeue_a_dead_lettered_run(page, tmp_path) -> None:
    run = dead_lettered(message="payment provider returned 500")
    page.goto(reverse("admin:runqueue_deadletteredrun_changelist"))
    playwright.expect(page.locator("#result_list")).to_contain_text(
        "ValueError: payment provider returned 500"
    )
    page.check(f"input[name=_selected_action][value='{run.id}']")
    page.select_option("select[name=action]", "requeue_runs")
    page.click("button[name=index]")
    playwright.expect(page.locator("h1")).to_contain_text("Requeue 1 run(s)?")
    # The failure, and what a requeue of a permanent failure will do.
    playwright.expect(page.locator("td.rq-failure")).to_contain_text(
        "ValueError: payment provider returned 500"
    )
    playwright.expect(page.locator("td.rq-attempts")).to_have_text("1 of 3")
    playwright.expect(page.locator(".rq-requeue-warning")).to_contain_text(
        "runs the same handler code on the same input"
    )
    screenshot(page, "requeue-confirm", tmp_path)
    page.fill("#id_reason", "provider is back")
    page.click("input[type=submit][value='Yes, requeue']")
    playwright.expect(page.locator(".messagelist")).to_contain_text("Requeued 1 run(s).")

    page.goto(reverse("admin:runqueue_run_change", args=[run.id]))
    playwright.expect(page.locator(".rq-run-header span.rq-status")).to_have_text("Queued")
    playwright.expect(page.locator(".rq-timeline")).to_contain_text("run.operator_requeued")
    screenshot(page, "run-after-requeue", tmp_path)
    assert Run.objects.get(id=run.id).status == "queued"
    event = EventLog.objects.get(run_id=run.id, type="run.operator_requeued")
    assert event.data["actor"] == "staff:support"


def test_resolve_an_uncertain_invocation(page, tmp_path) -> None:
    run, tool = uncertain()
    page.goto(reverse("admin:runqueue_uncertainrun_changelist"))
    page.click("a.rq-resolve")
    playwright.expect(page.locator("h1")).to_contain_text("Resolve uncertain charge_card #0")
    page.check("input[name=happened][value=yes]")
    page.fill("#id_note", "charge ch_42 is in the provider's dashboard")
    screenshot(page, "resolve-uncertain", tmp_path)
    page.click("input[type=submit][value='Record the answer']")
    playwright.expect(page.locator(".messagelist")).to_contain_text(
        f"Recorded: charge_card #0 of run {run.id} happened."
    )
    playwright.expect(page.locator(".paginator")).to_contain_text("0 uncertain runs")
    resolution = ToolInvocation.objects.get(id=tool.id).resolution
    assert resolution["happened"] is True and resolution["actor"] == "staff:support"


def test_open_the_dashboard(page, tmp_path) -> None:
    dead_lettered()
    uncertain()
    for priority in (0, 0, 5, 12, 12, 12, 25):
        run = runqueue.submit(kind="test.echo", priority=priority).run
        RunEvent.objects.bulk_create(  # claims as the claim logs them
            RunEvent(
                run=run,
                type="run.claimed",
                lease_epoch=1,
                data={"priority": priority, "wait_ms": (priority + 1) * 40 + n},
            )
            for n in range(0, 400, 7)
        )
    page.goto(reverse("admin:index"))
    page.click("#runqueue-dashboard-link a:text('Queue dashboard')")
    playwright.expect(page.locator("h1")).to_contain_text("Run queue dashboard")
    playwright.expect(page.locator("svg.rq-chart")).to_have_count(3)
    playwright.expect(page.locator("#rq-classes")).to_contain_text("Interactive")
    playwright.expect(page.locator("#rq-dead-lettered .n")).to_have_text("1")
    playwright.expect(page.locator("#rq-uncertain .n")).to_have_text("1")
    path = screenshot(page, "dashboard", tmp_path)
    assert path.stat().st_size > 10_000


def no_horizontal_scroll(page, *scrollers: str) -> None:
    """Neither the page nor these scrolling boxes scroll sideways."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= VIEWPORT["width"], f"the page is {width} px wide"
    for selector in scrollers:
        box = page.locator(selector).first
        scroll, client = box.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert scroll <= client, f"{selector} scrolls: {scroll} px in {client} px"


def inside_viewport(locator) -> None:
    box = locator.bounding_box()
    assert box is not None
    assert 0 <= box["x"] and box["x"] + box["width"] <= VIEWPORT["width"], box


def test_the_runs_list_fits_1366_px_with_status_after_the_id(page, tmp_path) -> None:
    session = "conversation-" + "7f3a" * 15
    tenant = "acme-corporation-europe-middle-east-africa"
    kind = "test.customer-support.refund-negotiation-with-escalation"
    dead_lettered(message="the order service answered 503 " + "and a long explanation " * 8)
    uncertain()
    long_run = runqueue.submit(kind=kind, session_id=session, tenant=tenant).run
    for url, first in (
        ("admin:runqueue_run_changelist", "status"),
        ("admin:runqueue_deadletteredrun_changelist", "failure"),
        ("admin:runqueue_uncertainrun_changelist", "status"),
    ):
        page.goto(reverse(url))
        headers = page.locator("#result_list thead th")
        texts = [t.strip().lower() for t in headers.all_inner_texts()]
        # After the action checkbox, where the list has actions (not uncertain runs).
        first_column = 1 if url != "admin:runqueue_uncertainrun_changelist" else 0
        assert texts[first_column : first_column + 2] == ["run", first], texts
        no_horizontal_scroll(page, "#changelist-form .results")
        for header in headers.all():  # Status, Class, Attempts, Age, Tenant...: all on screen
            inside_viewport(header)
    page.goto(reverse("admin:runqueue_run_changelist"))
    row = page.locator("#result_list tr", has_text=str(long_run.id)[:8])
    shortened = row.locator("td.field-session_display span.rq-short")
    playwright.expect(shortened).to_have_attribute("title", session)
    assert len(shortened.inner_text()) <= 20
    inside_viewport(row.locator("td.field-tenant_display"))
    screenshot(page, "runs-list-1366", tmp_path)


def test_uncertain_runs_are_marked_in_the_list_and_on_their_page(page, tmp_path) -> None:
    run, _tool = uncertain()
    runqueue.submit(kind="test.echo")
    page.goto(reverse("admin:runqueue_run_changelist"))
    row = page.locator("#result_list tr", has_text=str(run.id)[:8])
    playwright.expect(row.locator("td.field-status_display")).to_contain_text("Succeeded")
    playwright.expect(row.locator(".rq-uncertain-marker")).to_be_visible()
    playwright.expect(page.locator(".rq-uncertain-marker")).to_have_count(1)

    row.locator("th.field-short_id a").click()
    header = page.locator(".rq-run-header")
    playwright.expect(header.locator(".rq-uncertain-marker")).to_be_visible()
    playwright.expect(header).to_contain_text("may or may not have happened")
    inside_viewport(header.locator(".rq-uncertain-marker"))
    tool = page.locator("tr.rq-tool")
    playwright.expect(tool.locator("td.rq-tool-arguments")).to_contain_text('"cents": 1299')
    playwright.expect(tool.locator("td.rq-tool-error")).to_contain_text(
        "timed out after the request was sent"
    )
    no_horizontal_scroll(page, "fieldset .readonly:has(.rq-tools)")
    screenshot(page, "uncertain-run-page", tmp_path)


def test_admin_pages_load_without_a_404(page) -> None:
    """Every request a page makes answers, and the favicon a browser asks
    for (headless chromium does not ask on its own) is there."""
    failed: list[str] = []
    page.on(
        "response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None
    )
    for name in ("admin:index", "admin:runqueue_run_changelist", "admin:runqueue_run_dashboard"):
        page.goto(reverse(name))
        page.wait_for_load_state("networkidle")
    assert failed == []
    response = page.request.get("/favicon.ico")
    assert response.status == 200 and response.headers["content-type"] == "image/x-icon"


LINES = """e => new Set(Array.from((() => { const r = document.createRange();
    r.selectNodeContents(e); return r.getClientRects(); })()).map(x => Math.round(x.top))).size"""


def test_kinds_pids_and_token_columns_fit_1366_px(page, tmp_path) -> None:
    """Issue 26: every kind wrapped in the runs list, the worker list's PID
    took three lines, the tokens list hid Last used and Revoked at 1366 px."""
    from django.contrib.auth.models import Permission, User

    from runqueue.api import tokens
    from runqueue.models import Worker

    User.objects.get(username="support").user_permissions.add(
        *Permission.objects.filter(codename__in=["view_worker", "view_apitoken"])
    )
    runqueue.submit(kind="demo.agent_turn", tenant="acme")
    page.goto(reverse("admin:runqueue_run_changelist"))
    kind = page.locator("#result_list td.field-kind_display").first
    assert kind.evaluate(LINES) == 1, "the kind wraps"

    Worker.objects.create(
        id="worker-" + "a1b2" * 8,
        hostname="host-" + "x" * 40,
        pid=4194304,
        slots={"interactive": 2, "async": 2, "maintenance": 1},
    )
    page.goto(reverse("admin:runqueue_worker_changelist"))
    pid = page.locator("#result_list td.field-pid").first
    assert pid.evaluate(LINES) == 1, "the PID wraps"
    screenshot(page, "workers-list-1366", tmp_path)
    no_horizontal_scroll(page, "#changelist-form .results")

    owner = User.objects.create_user("a-support-agent-with-a-long-name")
    tokens.issue(user=owner, tenant="acme-corporation-europe", name="nightly export " * 4)
    page.goto(reverse("admin:runqueue_apitoken_changelist"))
    screenshot(page, "tokens-list-1366", tmp_path)
    no_horizontal_scroll(page, "#changelist-form .results")
    headers = page.locator("#result_list thead th")
    texts = [t.strip().lower() for t in headers.all_inner_texts()]
    assert "last used" in texts and "revoked" in texts, texts
    for header in headers.all():
        inside_viewport(header)
