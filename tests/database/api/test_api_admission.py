"""What the API admits: the kinds RUNQUEUE["API_KINDS"] lists (422
kind-not-allowed), up to a caller's priority ceiling (422
priority-not-allowed), within a token's submit quota (429 rate-limited with
Retry-After, kept in PostgreSQL). Nothing refused is written."""

from __future__ import annotations

import json
import threading

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from runqueue.models import ApiToken, ApiTokenQuota, IdempotencyKey, PriorityClass, Run
from tests.api_helpers import ApiCaller, make_caller, new_key, problem, submit
from tests.helpers import Worker, wait_until

pytestmark = pytest.mark.django_db


def _nothing_written() -> None:
    assert Run.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_a_kind_the_project_does_not_list_is_422_kind_not_allowed(client, settings) -> None:
    caller = make_caller("alice", "acme")
    body = problem(submit(client, caller, {"kind": "test.unlisted"}), 422, "kind-not-allowed")
    assert "test.unlisted" in body["detail"] and "test.echo" in body["allowed_kinds"]
    _nothing_written()
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_KINDS": []}  # the app's default: none
    problem(submit(client, caller, {"kind": "test.echo"}, key="k2"), 422, "kind-not-allowed")
    _nothing_written()


def test_a_listed_kind_without_a_handler_is_a_validation_failure(client, settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_KINDS": ["nobody.handles.this"]}
    caller = make_caller("alice", "acme")
    body = problem(
        submit(client, caller, {"kind": "nobody.handles.this"}), 422, "validation-failed"
    )
    assert body["errors"] == [
        {"pointer": "/kind", "detail": "no handler is registered for kind 'nobody.handles.this'"}
    ]
    _nothing_written()


def test_a_new_token_may_submit_async_and_below_and_that_is_its_default(client) -> None:
    user = get_user_model().objects.create_user(username="bob")
    from runqueue.api import tokens

    token, raw = tokens.issue(user=user, tenant="acme")
    assert (token.max_priority_class, token.submit_quota, token.submit_window_seconds) == (
        PriorityClass.ASYNC,
        60,
        60,
    )
    caller = ApiCaller(user=user, tenant="acme", raw=raw)
    default = submit(client, caller, {"kind": "test.echo"}, key="k1")
    assert (default.status_code, default.json()["priority"]) == (201, 10)
    assert default.json()["priority_class"] == "async"
    assert default.json()["concurrency_key"] == "acme"
    refused = submit(client, caller, {"kind": "test.echo", "priority": "interactive"}, key="k2")
    body = problem(refused, 422, "priority-not-allowed")
    assert (body["max_priority_class"], body["min_priority"]) == ("async", 10)
    refused = submit(client, caller, {"kind": "test.echo", "priority": 9}, key="k3")
    problem(refused, 422, "priority-not-allowed")
    for key, priority in (("k4", 10), ("k5", 19), ("k6", "maintenance")):
        response = submit(client, caller, {"kind": "test.echo", "priority": priority}, key=key)
        assert response.status_code == 201, response.content
    assert Run.objects.filter(priority__lt=10).count() == 0


def test_staff_allow_interactive_per_token(client) -> None:
    caller = make_caller("carol", "acme", max_priority_class=PriorityClass.INTERACTIVE)
    response = submit(client, caller, {"kind": "test.echo"})
    assert response.json()["priority_class"] == "interactive"


def test_a_browser_session_has_the_session_ceiling(settings) -> None:
    user = get_user_model().objects.create_user(username="dora", password="pw")
    browser = Client()
    browser.force_login(user)

    def post(body: dict, key: str):
        return browser.post(
            "/api/runs/",
            data=json.dumps(body),
            content_type="application/json",
            headers={"Idempotency-Key": key},
        )

    problem(post({"kind": "test.echo", "priority": 0}, "a"), 422, "priority-not-allowed")
    assert post({"kind": "test.echo"}, "b").json()["priority"] == 10
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_SESSION_MAX_PRIORITY_CLASS": "interactive"}
    assert post({"kind": "test.echo", "priority": 0}, "c").status_code == 201


def test_the_newcomers_slot_hogging_request_is_refused(client, settings) -> None:
    """The request from issue 12, against the deployable project's own
    settings: chaos.turn is not a kind the API admits (nor installed), and
    a new token may not submit interactive runs."""
    settings.RUNQUEUE = {"API_KINDS": settings.DEMO_KINDS}
    user = get_user_model().objects.create_user(username="newcomer")
    from runqueue.api import tokens

    _token, raw = tokens.issue(user=user, tenant="newco")
    caller = ApiCaller(user=user, tenant="newco", raw=raw)
    hog = {"kind": "chaos.turn", "payload": {"work_ms": 150000, "steps": 1}}
    problem(submit(client, caller, hog | {"priority": "interactive"}), 422, "kind-not-allowed")
    demo = {"kind": "demo.research", "payload": {"steps": 1000}, "priority": "interactive"}
    problem(submit(client, caller, demo, key="k2"), 422, "priority-not-allowed")
    _nothing_written()


def test_a_token_over_its_quota_is_429_with_retry_after(client) -> None:
    caller = make_caller("erin", "acme", submit_quota=3, submit_window_seconds=60)
    for i in range(3):
        assert submit(client, caller, {"kind": "test.echo"}, key=f"k{i}").status_code == 201
    refused = submit(client, caller, {"kind": "test.echo"}, key="k3")
    body = problem(refused, 429, "rate-limited")
    assert (body["quota"], body["window_seconds"]) == (3, 60)
    assert 19 <= int(refused["Retry-After"]) <= 20  # one submit every 20 s
    assert Run.objects.count() == 3
    # Any request counts, even one refused later for its body.
    other = make_caller("fred", "acme", submit_quota=1)
    problem(submit(client, other, {"kind": "nope"}, key="x"), 422, "kind-not-allowed")
    problem(submit(client, other, {"kind": "test.echo"}, key="y"), 429, "rate-limited")


def test_a_quota_of_zero_refuses_every_submit_and_none_means_no_quota(client) -> None:
    stopped = make_caller("gail", "acme", submit_quota=0, submit_window_seconds=30)
    response = submit(client, stopped, {"kind": "test.echo"})
    problem(response, 429, "rate-limited")
    assert response["Retry-After"] == "30"
    free = make_caller("hal", "acme", submit_quota=None)
    for i in range(70):
        assert submit(client, free, {"kind": "test.echo"}, key=f"k{i}").status_code == 201
    assert not ApiTokenQuota.objects.filter(token__user__username="hal").exists()


@pytest.mark.django_db(transaction=True)
def test_the_window_slides(client) -> None:
    """Two a second: the third waits until the first has left the window."""
    caller = make_caller("ida", "acme", submit_quota=2, submit_window_seconds=1)
    for i in range(2):
        assert submit(client, caller, {"kind": "test.echo"}, key=f"k{i}").status_code == 201
    refused = submit(client, caller, {"kind": "test.echo"}, key="k2")
    assert problem(refused, 429, "rate-limited") and refused["Retry-After"] == "1"
    wait_until(
        lambda: submit(client, caller, {"kind": "test.echo"}, key=new_key()).status_code == 201,
        timeout=5,
        what="the quota to admit again",
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_never_exceed_the_quota() -> None:
    caller = make_caller("jo", "acme", submit_quota=5, submit_window_seconds=300)
    barrier = threading.Barrier(12)

    def one(i: int) -> int:
        barrier.wait(10)
        return submit(Client(), caller, {"kind": "test.echo"}, key=f"k{i}").status_code

    threads = [Worker(lambda i=i: one(i), name=f"client-{i}") for i in range(12)]
    for thread in threads:
        thread.start()
    statuses = sorted(thread.outcome() for thread in threads)
    assert statuses == [201] * 5 + [429] * 7
    assert Run.objects.count() == 5


def test_the_admin_sets_a_tokens_ceiling_and_quota(admin_client) -> None:
    user = get_user_model().objects.create_user(username="kim")
    response = admin_client.post(
        "/admin/runqueue/apitoken/add/",
        {
            "name": "kim's bot",
            "user": user.pk,
            "tenant": "acme",
            "max_priority_class": PriorityClass.MAINTENANCE,
            "submit_quota": 10,
            "submit_window_seconds": 3600,
        },
    )
    assert response.status_code == 200, response.content  # the page showing the raw token
    token = ApiToken.objects.get(name="kim's bot")
    assert (token.max_priority_class, token.submit_quota, token.submit_window_seconds) == (
        PriorityClass.MAINTENANCE,
        10,
        3600,
    )
    change = admin_client.get(f"/admin/runqueue/apitoken/{token.pk}/change/")
    assert b'name="submit_quota"' in change.content
    assert b'name="max_priority_class"' in change.content
    admin_client.post(
        f"/admin/runqueue/apitoken/{token.pk}/change/",
        {
            "name": "kim's bot",
            "max_priority_class": PriorityClass.ASYNC,
            "submit_quota": "",
            "submit_window_seconds": 60,
        },
    )
    token.refresh_from_db()
    assert (token.max_priority_class, token.submit_quota) == (PriorityClass.ASYNC, None)
