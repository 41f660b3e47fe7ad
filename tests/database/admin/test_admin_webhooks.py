"""Webhooks in the console and the API: an endpoint's secret shown once,
dead deliveries listed, the resend action behind its own permission, and
the submit's ``webhook`` member (accepted under an endpoint, refused with a
422 for a loopback host nobody allowed, nothing written)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

import runqueue
from runqueue import webhooks
from runqueue.models import Run, WebhookDelivery, WebhookEndpoint, WebhookTarget
from tests.admin_support import PASSWORD, staff
from tests.api_helpers import make_caller, problem, submit
from tests.database.webhooks.test_webhooks import ALLOW_LOCAL, deliver_due, finish
from tests.webhook_receiver import receiving, signature_valid

pytestmark = pytest.mark.django_db

ENDPOINTS = reverse("admin:runqueue_webhookendpoint_changelist")
DELIVERIES = reverse("admin:runqueue_webhookdelivery_changelist")


def login(username: str, *perms: str) -> Client:
    staff(username, *perms)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def test_the_secret_is_shown_once_at_creation(settings) -> None:
    settings.RUNQUEUE = dict(ALLOW_LOCAL)
    client = login("ops", "add_webhookendpoint", "view_webhookendpoint", "change_webhookendpoint")
    response = client.post(
        reverse("admin:runqueue_webhookendpoint_add"),
        {
            "name": "billing",
            "url": "http://127.0.0.1:9/hooks",
            "tenant": "acme",
            "subscribed": "on",
            "kinds": "[]",
            "event_types": '["run.failed"]',
            "max_attempts": "12",
            "active": "on",
        },
    )
    assert response.status_code == 200, response.content
    assert response["Cache-Control"].startswith("no-store")
    (shown,) = re.findall(r"whsec_[A-Za-z0-9+/=]+", response.content.decode())
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret == shown
    page = client.get(reverse("admin:runqueue_webhookendpoint_change", args=[endpoint.pk]))
    assert page.status_code == 200 and shown not in page.content.decode()
    rotated = client.post(
        ENDPOINTS, {"action": "rotate_secrets", "_selected_action": [endpoint.pk]}
    )
    (new,) = re.findall(r"whsec_[A-Za-z0-9+/=]+", rotated.content.decode())
    endpoint.refresh_from_db()
    assert (endpoint.secret, endpoint.previous_secret) == (new, shown)


def test_an_endpoint_to_an_unlisted_loopback_is_refused_by_the_form() -> None:
    client = login("ops", "add_webhookendpoint", "view_webhookendpoint")
    response = client.post(
        reverse("admin:runqueue_webhookendpoint_add"),
        {
            "url": "http://127.0.0.1:9/hooks",
            "kinds": "[]",
            "event_types": "[]",
            "max_attempts": "12",
            "active": "on",
        },
    )
    assert response.status_code == 200
    assert "WEBHOOK_ALLOW_HOSTS" in response.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_dead_deliveries_are_listed_and_resent_with_the_permission(settings) -> None:
    settings.RUNQUEUE = dict(ALLOW_LOCAL)
    with receiving(then="500") as receiver:
        webhooks.create_endpoint(receiver.url, max_attempts=1)
        finish()
        finish(how="fail")
        assert deliver_due() == ["failed", "failed"]
        viewer = login("viewer", "view_webhookdelivery", "view_run")
        dead = viewer.get(DELIVERIES + "?state=dead")
        assert dead.status_code == 200
        assert dead.context["cl"].result_count == 2
        assert viewer.get(DELIVERIES + "?state=delivered").context["cl"].result_count == 0
        assert dead.context["action_form"] is None  # no action without resend_delivery
        delivery = WebhookDelivery.objects.order_by("id").first()
        assert delivery is not None
        refused = viewer.post(DELIVERIES, {"action": "resend", "_selected_action": [delivery.pk]})
        assert Run.objects.get(id=delivery.attempt_run_id).status == "failed"
        assert refused.status_code in (200, 302, 403)
        receiver.then = "ok"
        operator = login("operator", "view_webhookdelivery", "resend_delivery")
        operator.post(DELIVERIES, {"action": "resend", "_selected_action": [delivery.pk]})
        assert Run.objects.get(id=delivery.attempt_run_id).status == "queued"
        assert deliver_due() == ["succeeded"]
        assert receiver.processed.keys() == {delivery.message_id}


def test_the_api_submit_takes_a_webhook_under_an_endpoint(client, settings) -> None:
    settings.RUNQUEUE = {**ALLOW_LOCAL, "API_KINDS": ["test.echo"]}
    alice = make_caller("alice", "acme")
    with receiving() as receiver:
        _, secret = webhooks.create_endpoint(receiver.url, tenant="acme", subscribed=False)
        response = submit(
            client, alice, {"kind": "test.echo", "webhook": receiver.url + "/r1"}, key="k1"
        )
        assert response.status_code == 201, response.content
        run = Run.objects.get(id=response.json()["id"])
        assert WebhookTarget.objects.get(run=run).url == receiver.url + "/r1"
        bad = submit(client, alice, {"kind": "test.echo", "webhook": 42}, key="k2")
        assert problem(bad, 422, "validation-failed")["errors"][0]["pointer"] == "/webhook"
        settings.RUNQUEUE = {"API_KINDS": ["test.echo"]}
        before = Run.objects.count()
        refused = submit(
            client, alice, {"kind": "test.echo", "webhook": receiver.url + "/r2"}, key="k3"
        )
        body = problem(refused, 422, "validation-failed")
        assert body["errors"][0]["pointer"] == "/webhook"
        assert "127.0.0.1" in body["errors"][0]["detail"]
        assert Run.objects.count() == before
        # The accepted run's events go to its own URL, signed with the endpoint's secret.
        settings.RUNQUEUE = {**ALLOW_LOCAL, "API_KINDS": ["test.echo"]}
        runqueue.cancel(run.id, reason="done", actor="t")
        assert deliver_due() == ["succeeded"]
        (got,) = receiver.requests
        assert got.path == "/hooks/r1" and signature_valid(secret, got)
