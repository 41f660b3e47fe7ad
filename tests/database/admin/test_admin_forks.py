"""The admin's forks and costs: "Fork from here" on a finished run's steps
(a confirmation page with a reason and an optional edited payload), the
bulk "Fork from failure" on dead-lettered runs, each permitted and
audited; lineage on the run page; cost columns, filters and tree totals."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils.html import escape

import runqueue
from runqueue import leases, testing
from runqueue.models import EventLog, Run, RunStatus
from tests.admin_support import dead_lettered, uncertain
from tests.database.admin.test_admin import DEAD, RUNS, action, login, messages_of

# The ledger empty: committed for the handlers, and the provider of
# ``tool_fails_at`` down.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("empty_ledger")]


def _failed_steps() -> Run:
    run = runqueue.submit(kind="test.steps", payload={"steps": 3, "fail_after": 1}).run
    lease = leases.claim_one("w-test")
    assert lease is not None and testing.execute(lease) == "failed"
    return Run.objects.get(id=run.id)


def _fork_url(run: Run, step: int) -> str:
    return reverse("admin:runqueue_run_fork", args=[run.id]) + f"?step={step}"


def test_fork_from_here_confirms_then_forks_with_the_edited_payload() -> None:
    run = _failed_steps()
    client = login("ann", "view_run", "fork_run")
    page = client.get(reverse("admin:runqueue_run_change", args=[run.id])).content.decode()
    assert page.count('class="rq-fork"') == 2  # steps 0 and 1
    assert _fork_url(run, 1) in page and _fork_url(run, 2) in page  # and after the last

    confirm = client.get(_fork_url(run, 1))
    html = confirm.content.decode()
    assert confirm.status_code == 200
    assert "Kept (1 step)" in html and "step1" in html
    assert Run.objects.count() == 1  # a GET forks nothing

    response = client.post(
        _fork_url(run, 1),
        {"reason": "fixed the order service", "payload": '{"steps": 3, "fail_after": null}'},
    )
    fork = Run.objects.get(forked_from_id=run.id)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:runqueue_run_change", args=[fork.id])
    assert fork.payload == {"steps": 3, "fail_after": None}
    assert list(fork.tool_invocations.values_list("seq", flat=True)) == [0]
    event = EventLog.objects.get(run_id=fork.id, type="run.forked")
    assert event.data["actor"] == "staff:ann"
    assert event.data["reason"] == "fixed the order service"
    assert event.data["payload_edited"] is True
    assert LogEntry.objects.filter(object_id__in=[str(run.id), str(fork.id)]).count() == 2
    # Lineage both ways on the run pages.
    original_page = client.get(reverse("admin:runqueue_run_change", args=[run.id]))
    assert str(fork.id)[:8] in original_page.content.decode()
    fork_page = client.get(reverse("admin:runqueue_run_change", args=[fork.id]))
    assert f'Forked from <a href="{reverse("admin:runqueue_run_change", args=[run.id])}"' in (
        fork_page.content.decode()
    )


def test_the_page_says_why_a_fork_is_refused_and_writes_nothing() -> None:
    run, _tool = uncertain(payload={"then_fail": True})
    client = login("bea", "view_run", "fork_run")
    response = client.post(_fork_url(run, 1), {"reason": "try again", "payload": ""})
    assert response.status_code == 200
    assert "ended uncertain and nobody resolved it" in response.content.decode()
    assert not Run.objects.filter(forked_from_id=run.id).exists()
    response = client.post(_fork_url(run, 1), {"reason": "", "payload": "{not json"})
    assert response.status_code == 200
    assert not Run.objects.filter(forked_from_id=run.id).exists()


def test_forking_needs_the_fork_permission_and_a_finished_run() -> None:
    run = _failed_steps()
    viewer = login("cid", "view_run")
    page = viewer.get(reverse("admin:runqueue_run_change", args=[run.id])).content.decode()
    assert "rq-fork" not in page
    assert viewer.get(_fork_url(run, 0)).status_code == 403
    assert viewer.post(_fork_url(run, 0), {"reason": "x"}).status_code == 403
    live = runqueue.submit(kind="test.echo").run
    forker = login("dee", "view_run", "fork_run")
    page = forker.get(reverse("admin:runqueue_run_change", args=[live.id])).content.decode()
    assert "rq-fork" not in page  # a live run has no fork links
    response = forker.post(_fork_url(live, 0), {"reason": "x", "payload": ""})
    assert "it is queued" in response.content.decode()
    assert forker.get(reverse("admin:runqueue_run_fork", args=[run.id])).status_code == 404
    assert not Run.objects.filter(forked_from__isnull=False).exists()


def test_fork_from_failure_on_dead_lettered_runs() -> None:
    first, second = _failed_steps(), dead_lettered()
    client = login("eve", "view_run", "fork_run")
    confirm = action(client, DEAD, "fork_from_failure", [first, second])
    assert confirm.status_code == 200 and "Yes, fork" in confirm.content.decode()
    done = action(
        client, DEAD, "fork_from_failure", [first, second], confirm="yes", reason="provider back"
    )
    assert done.status_code == 302
    assert "Forked 2 run(s)." in messages_of(done)
    fork = Run.objects.get(forked_from_id=first.id)
    assert fork.tool_invocations.count() == 2  # every recorded step kept
    assert Run.objects.filter(forked_from_id=second.id).count() == 1
    assert EventLog.objects.get(run_id=first.id, type="run.forked").data["reason"] == (
        "provider back"
    )
    nobody = login("fay", "view_run", "requeue_run")
    listed = nobody.get(DEAD).content.decode()
    assert "fork_from_failure" not in listed  # no permission, no action


def test_the_run_list_shows_cost_and_filters_by_usage_and_forks(settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "PRICES": {"m": {"input": 1, "output": 2}}}
    spent = runqueue.submit(
        kind="test.usage",
        payload={"calls": [{"model": "m", "in": 1_000_000, "out": 500_000}]},
        spend_cap=100,
    ).run
    idle = runqueue.submit(kind="test.echo").run
    for _ in range(2):
        lease = leases.claim_one("w-test")
        assert lease is not None
        testing.execute(lease)
    assert Run.objects.get(id=spent.id).status == RunStatus.SUCCEEDED
    client = login("gus", "view_run")
    # The cost column shows on a list filtered by model calls (1366 px: not on every list).
    page = client.get(RUNS).content.decode()
    assert "field-cost_display" not in page
    recorded = client.get(RUNS + "?usage=recorded").content.decode()
    assert 'title="1 calls, 1,000,000 tokens in, 500,000 out">2<' in recorded
    assert str(spent.id)[:8] in recorded and str(idle.id)[:8] not in recorded
    none = client.get(RUNS + "?usage=none").content.decode()
    assert str(idle.id)[:8] in none and str(spent.id)[:8] not in none
    detail = client.get(reverse("admin:runqueue_run_change", args=[spent.id])).content.decode()
    assert "This run: 1 call(s), 1,000,000 tokens in, 500,000 out, cost 2." in detail
    assert "spend cap 100" in detail
    fork = runqueue.fork(spent.id, from_step=0, actor="a", reason="r")
    forks = client.get(RUNS + "?fork=fork").content.decode()
    assert str(fork.id)[:8] in forks and str(spent.id)[:8] not in forks
    forked = client.get(RUNS + "?fork=forked").content.decode()
    assert str(spent.id)[:8] in forked and str(fork.id)[:8] not in forked


def test_a_step_past_the_recorded_ones_is_refused_at_once_in_constant_memory() -> None:
    """Issue 47: ``from_step=2**31`` built a list as long as the step number
    under the original's row lock (gigabytes, minutes); past the steps the
    run recorded is InvalidArgument, checked before anything that grows."""
    import tracemalloc

    run = _failed_steps()
    for huge in (3, 2**31, 2**63, 10**20):
        tracemalloc.start()
        try:
            with pytest.raises(runqueue.InvalidArgument, match=r"from_step must be at most 2 "):
                runqueue.fork(run.id, from_step=huge, actor="a", reason="r")
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 5_000_000, (huge, peak)
    assert not Run.objects.filter(forked_from_id=run.id).exists()


@pytest.mark.parametrize("step", ["3", str(2**31), "99999999999999999999", "1" * 500])
def test_the_fork_page_of_a_step_past_the_recorded_ones_is_404_never_500(step: str) -> None:
    run = _failed_steps()
    client = login("hal", "view_run", "fork_run")
    client.raise_request_exception = False
    url = reverse("admin:runqueue_run_fork", args=[run.id]) + f"?step={step}"
    assert client.get(url).status_code == 404
    assert client.post(url, {"reason": "r", "payload": ""}).status_code == 404
    assert not Run.objects.filter(forked_from_id=run.id).exists()


@pytest.mark.parametrize("payload", ["9" * 5000, '{"steps": ' + "1" * 5000 + "}"])
def test_the_fork_form_refuses_a_payload_with_a_5000_digit_integer(payload: str) -> None:
    """Issue 47: json.loads raises ValueError (not JSONDecodeError) past
    Python's 4,300 digits: a 500 on the fork form. A form error now, and
    the text redisplayed as typed."""
    run = _failed_steps()
    client = login("ida", "view_run", "fork_run")
    client.raise_request_exception = False
    response = client.post(_fork_url(run, 1), {"reason": "r", "payload": payload})
    assert response.status_code == 200
    html = response.content.decode()
    assert "errorlist" in html and "at most 4,300 digits" in html
    assert escape(payload[:40]) in html
    assert not Run.objects.filter(forked_from_id=run.id).exists()


def test_fork_from_failure_runs_the_failed_tool_call_again_and_links_the_fork() -> None:
    """Issue 47: for a run whose tool call failed (the common dead letter),
    the fork kept the failed call's record, replayed its failure and was
    dead-lettered again. It keeps the steps before the failed call; the
    confirmation lists what is kept and what runs again, and the message
    after links to the new run."""
    run = runqueue.submit(kind="test.steps", payload={"steps": 4, "tool_fails_at": 2}).run
    lease = leases.claim_one("w-test")
    assert lease is not None and testing.execute(lease) == "failed"
    assert run.tool_invocations.get(seq=2).status == "failed"
    client = login("jon", "view_run", "fork_run")
    confirm = action(client, DEAD, "fork_from_failure", [run]).content.decode()
    plan = confirm[confirm.index('class="rq-fork-plans"') :]
    kept, again = plan.split('class="rq-fork-again"')[:2]
    assert "step0" in kept and "step1" in kept and "step2" not in kept
    assert "step2" in again and "failed" in again and "step3" not in again
    assert "Keeps 2 steps, before its failed call #2" in plan
    done = action(client, DEAD, "fork_from_failure", [run], confirm="yes", reason="provider up")
    fork = Run.objects.get(forked_from_id=run.id)
    assert list(fork.tool_invocations.values_list("seq", flat=True)) == [0, 1]
    forked = EventLog.objects.get(run_id=fork.id, type="run.forked").data
    assert (forked["from_step"], forked["failed_step"]) == (2, 2)
    link = reverse("admin:runqueue_run_change", args=[fork.id])
    assert any(f'<a href="{link}">' in message for message in messages_of(done))
