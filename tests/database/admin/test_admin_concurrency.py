"""Concurrency limits in the admin: staff with the permission add, change
and delete them (0 pauses a key), see what runs now, and the next claim
obeys; a run's page shows its concurrency key."""

from __future__ import annotations

import pytest
from django.test import Client

import runqueue
from runqueue import leases
from runqueue.capacity import concurrency
from runqueue.models import ConcurrencyLimit, PriorityClass
from tests.admin_support import PASSWORD, staff

pytestmark = pytest.mark.django_db

URL = "/admin/runqueue/concurrencylimit/"


def _client(*perms: str) -> Client:
    user = staff("sam", *perms)
    client = Client()
    client.login(username=user.username, password=PASSWORD)
    return client


def test_staff_pause_a_key_and_the_claim_steps_over_it(settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "CONCURRENCY": {"async": 4}}
    client = _client("view_concurrencylimit", "add_concurrencylimit", "change_concurrencylimit")
    listing = client.get(URL)
    assert listing.status_code == 200
    assert "Keys without a limit: interactive no cap, async 4, maintenance no cap" in (
        listing.content.decode()
    )
    paused = runqueue.submit(kind="k", tenant="acme").run
    other = runqueue.submit(kind="k", tenant="zeta").run
    response = client.post(
        URL + "add/",
        {"key": "acme", "priority_class": 0, "max_running": 0, "note": "incident 42"},
    )
    assert response.status_code == 302, response.content
    assert [lease.run_id for lease in leases.claim("w", limit=5)] == [other.id]
    limit = ConcurrencyLimit.objects.get(key="acme")
    assert "0 (paused)" in client.get(URL).content.decode()
    client.post(
        URL + f"{limit.pk}/change/",
        {"key": "acme", "priority_class": 0, "max_running": 1, "note": "resumed"},
    )
    assert [lease.run_id for lease in leases.claim("w", limit=5)] == [paused.id]
    assert "1 of 1" in client.get(URL).content.decode()


def test_bad_limits_are_refused_with_a_message() -> None:
    client = _client("view_concurrencylimit", "add_concurrencylimit")
    ConcurrencyLimit.objects.create(key="acme", priority_class=0, max_running=2)
    for data, message in (
        ({"key": "acme", "priority_class": 0, "max_running": 3}, "already exists"),
        ({"key": "", "priority_class": 0, "max_running": 3}, "This field is required"),
        ({"key": "b", "priority_class": 5, "max_running": 3}, "Select a valid choice"),
        ({"key": "b", "priority_class": 0, "max_running": -1}, "greater than or equal to 0"),
    ):
        response = client.post(URL + "add/", data)
        assert response.status_code == 200 and message in response.content.decode(), data
    assert ConcurrencyLimit.objects.count() == 1


def test_without_the_permission_there_is_no_limits_page() -> None:
    assert _client("view_run").get(URL).status_code == 403


def test_deleting_the_last_limit_takes_claims_back_to_the_plain_statement(admin_client) -> None:
    limit = ConcurrencyLimit.objects.create(key="acme", priority_class=10, max_running=1)
    assert concurrency.caps_may_apply()
    admin_client.post(URL + f"{limit.pk}/delete/", {"post": "yes"})
    assert not ConcurrencyLimit.objects.exists()
    assert not concurrency.caps_may_apply()


def test_a_runs_page_shows_its_concurrency_key(admin_client) -> None:
    run = runqueue.submit(kind="k", tenant="acme", concurrency_key="acme:bot-7").run
    page = admin_client.get(f"/admin/runqueue/run/{run.id}/change/").content.decode()
    assert "Concurrency key" in page and "acme:bot-7" in page
    assert PriorityClass.of(run.priority) == PriorityClass.INTERACTIVE
