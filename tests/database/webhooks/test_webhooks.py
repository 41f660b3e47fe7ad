"""Outbound webhooks against a local receiver: every event delivered, one
webhook-id per event, signatures checked by an independent HMAC, retries
with the delivery's backoff, a dead letter, a resend, the SSRF rule at
submit and at delivery, and nothing for an event that rolled back."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection, transaction
from standardwebhooks.webhooks import Webhook

import runqueue
from runqueue import leases, testing, webhooks
from runqueue.errors import InvalidSubmission
from runqueue.models import PriorityClass, Run, RunEvent, WebhookDelivery, WebhookTarget
from runqueue.webhooks.sending import DELIVER, retry_delay
from tests.admin_support import uncertain
from tests.webhook_receiver import Receiver, receiving, signature_valid

pytestmark = pytest.mark.django_db

ALLOW_LOCAL = {"WEBHOOK_ALLOW_HOSTS": ["127.0.0.1"], "WEBHOOK_TIMEOUT_SECONDS": 0.5}


@pytest.fixture
def local(settings) -> None:
    settings.RUNQUEUE = dict(ALLOW_LOCAL)


def make_due(run_id: Any) -> None:
    """Move a delivery's next try to now on the database clock (test-only),
    as tests/helpers.py ``expire_lease`` moves a lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET scheduled_for = now() WHERE id = %s AND status = 'queued'",
            [run_id],
        )


def attempt_runs() -> list[Run]:
    return list(Run.objects.filter(kind=DELIVER).order_by("created_at"))


def deliver_due(limit: int = 100) -> list[str]:
    """Run every due delivery try once, as a maintenance slot would."""
    done = []
    for _ in range(limit):
        lease = leases.claim_one("w-hooks", [PriorityClass.MAINTENANCE])
        if lease is None:
            break
        assert lease.run.kind == DELIVER
        done.append(testing.execute(lease))
    return done


def finish(kind: str = "test.echo", how: str = "succeed", **submit: Any) -> Run:
    """A run driven to a status a webhook reports."""
    sub = runqueue.submit(kind=kind, **submit)
    if how == "cancel":
        return runqueue.cancel(sub.run.id, reason="not needed", actor="t")
    lease = leases.claim_one("w-test", [PriorityClass.INTERACTIVE])
    assert lease is not None and lease.run_id == sub.run.id
    if how == "succeed":
        testing.succeed(lease, {"answer": 42})
    elif how == "fail":
        testing.fail(lease, leases.permanent_failure(ValueError("card declined"), 1))
    elif how == "ask":
        leases.wait_for_user(lease, {"question": "which day?"})
    return Run.objects.get(id=sub.run.id)


def test_every_event_delivered_once_per_id_and_signed(local) -> None:
    with receiving(plan=["500", "hang", "slow"]) as receiver:
        endpoint, secret = webhooks.create_endpoint(receiver.url)
        runs = [finish(how=how) for how in ("succeed", "fail", "cancel", "ask", "succeed")]
        _, _call = uncertain()
        deliveries = list(WebhookDelivery.objects.order_by("id"))
        # One delivery per event, written with it.
        assert sorted(d.event_type for d in deliveries) == [
            "run.cancelled",
            "run.failed",
            "run.succeeded",
            "run.succeeded",
            "run.succeeded",  # the uncertain run's handler went on and succeeded
            "run.waiting_for_user",
            "tool.uncertain",
        ]
        for _ in range(5):
            deliver_due()
            for run in Run.objects.filter(kind=DELIVER, status="queued"):
                make_due(run.id)
        assert all(d.attempt_run.status == "succeeded" for d in WebhookDelivery.objects.all())
        ids = {d.message_id for d in deliveries}
        assert set(receiver.processed) == ids  # every event processed
        # Never two ids for one event: one id per delivery, the same on retries.
        assert len(ids) == len(deliveries)
        per_id: dict[str, set[str]] = {}
        for got in receiver.requests:
            per_id.setdefault(got.message_id, set()).add(got.body.decode())
            assert signature_valid(secret, got)
            Webhook(secret).verify(got.body, got.headers)
        assert all(len(bodies) == 1 for bodies in per_id.values())
        # The failed, hung and slow answers were tried again under the same id.
        assert len(receiver.requests) == len(ids) + 2
    by_run = {d.run_id: d for d in deliveries if d.event_type.startswith("run.")}
    assert by_run[runs[0].id].body["data"]["result"] == {"answer": 42}
    assert "traceback" not in by_run[runs[1].id].body["data"]["failure"]
    assert endpoint.deliveries.count() == len(deliveries)


def test_backoff_then_dead_then_resend(local) -> None:
    with receiving(then="503") as receiver:
        endpoint, _ = webhooks.create_endpoint(receiver.url, max_attempts=4)
        finish()
        (delivery,) = WebhookDelivery.objects.all()
        run_id = delivery.attempt_run_id
        delays = []
        for _ in range(4):
            assert deliver_due() in (["requeued"], ["failed"])
            run = Run.objects.get(id=run_id)
            if run.status == "queued":
                requeued = RunEvent.objects.filter(run_id=run_id, type="run.requeued").last()
                assert requeued is not None
                delays.append((run.scheduled_for - requeued.created_at).total_seconds())
                assert deliver_due() == []  # not due before its backoff
                make_due(run_id)
        assert [round(d) for d in delays] == [5, 10, 20]
        assert Run.objects.get(id=run_id).status == "failed"  # the dead letter
        assert len(receiver.requests) == 4
        assert len(set(receiver.ids())) == 1
        receiver.then = "ok"
        webhooks.resend(WebhookDelivery.objects.get(pk=delivery.pk), actor="t")
        assert deliver_due() == ["succeeded"]
        assert set(receiver.processed) == {delivery.message_id}
        delivery.refresh_from_db()
        assert delivery.delivered_at is not None and delivery.attempts == 5
        # Resending a delivered one makes a new run; same id, same body.
        webhooks.resend(delivery, actor="t")
        assert deliver_due() == ["succeeded"]
        assert receiver.requests[-1].body == receiver.requests[0].body
    assert retry_delay(12) == 5 * 2**11
    assert retry_delay(30) == 86400
    assert endpoint.max_attempts == 4


def test_retry_after_is_honoured(local) -> None:
    with receiving(plan=["429"], retry_after="120") as receiver:
        webhooks.create_endpoint(receiver.url)
        finish()
        assert deliver_due() == ["requeued"]
        (run,) = attempt_runs()
        requeued = RunEvent.objects.filter(run_id=run.id, type="run.requeued").get()
        assert round((run.scheduled_for - requeued.created_at).total_seconds()) == 120


def test_rolled_back_event_is_never_delivered(local) -> None:
    with receiving() as receiver:
        webhooks.create_endpoint(receiver.url)
        sub = runqueue.submit(kind="test.echo")
        lease = leases.claim_one("w-test", [PriorityClass.INTERACTIVE])
        assert lease is not None
        with pytest.raises(RuntimeError), transaction.atomic():
            testing.succeed(lease, {"x": 1})
            assert WebhookDelivery.objects.count() == 1  # written with the event
            raise RuntimeError("rolled back")
        assert WebhookDelivery.objects.count() == 0
        assert attempt_runs() == []
        assert Run.objects.get(id=sub.run.id).status == "running"
        assert deliver_due() == []
        assert receiver.requests == []


def test_loopback_refused_at_submit_without_the_allow_list(settings) -> None:
    settings.RUNQUEUE = dict(ALLOW_LOCAL)
    endpoint, _ = webhooks.create_endpoint("http://127.0.0.1:9/hooks", subscribed=False)
    settings.RUNQUEUE = {}
    before = Run.objects.count()
    with pytest.raises(InvalidSubmission) as caught:
        runqueue.submit(kind="test.echo", webhook="http://127.0.0.1:9/hooks/run-1")
    assert caught.value.field == "webhook"
    assert "127.0.0.1" in str(caught.value) and "WEBHOOK_ALLOW_HOSTS" in str(caught.value)
    assert Run.objects.count() == before and not WebhookTarget.objects.exists()
    for url in (
        "http://[::1]/hooks",
        "http://169.254.169.254/x",
        "http://10.0.0.1/x",
        "ftp://example.com/x",
        "http://user:pw@example.com/x",
    ):
        with pytest.raises(webhooks.UrlRefused):
            webhooks.addresses.check(url)
    with pytest.raises(webhooks.UrlRefused):
        webhooks.create_endpoint("http://localhost/hooks")
    assert endpoint.active


def test_refused_at_delivery_when_no_longer_allowed(settings) -> None:
    settings.RUNQUEUE = dict(ALLOW_LOCAL)
    with receiving() as receiver:
        webhooks.create_endpoint(receiver.url)
        finish()
        settings.RUNQUEUE = {}
        assert deliver_due() == ["failed"]  # permanent: never tried again
        (delivery,) = WebhookDelivery.objects.all()
        assert delivery.last_error.startswith("refused")
        assert receiver.requests == []


def test_redirect_is_not_followed(local) -> None:
    with receiving(plan=["redirect"]) as receiver:
        webhooks.create_endpoint(receiver.url)
        finish()
        assert deliver_due() == ["requeued"]
        (delivery,) = WebhookDelivery.objects.all()
        assert delivery.last_status == 302 and delivery.delivered_at is None


def test_a_submits_own_url_and_the_endpoint_filters(local) -> None:
    with receiving() as receiver:
        mine, secret = webhooks.create_endpoint(receiver.url, subscribed=False, tenant="acme")
        kinds, _ = webhooks.create_endpoint(
            receiver.url + "/kinds", kinds=["other"], event_types=["run.succeeded"]
        )
        own = finish(tenant="acme", webhook=receiver.url + "/run-1")
        finish(tenant="acme")  # no URL of its own, and mine is not subscribed
        finish(kind="other", how="cancel")  # not an event kinds takes
        other = finish(kind="other")
        with pytest.raises(InvalidSubmission):  # not under an endpoint of its tenant
            runqueue.submit(kind="test.echo", tenant="beta", webhook=receiver.url + "/x")
        with pytest.raises(InvalidSubmission):  # a path boundary, not a string prefix
            runqueue.submit(kind="test.echo", tenant="acme", webhook=receiver.url + "-evil")
        deliver_due()
        paths = sorted((r.path, r.event["data"]["run"]) for r in receiver.requests)
        assert paths == sorted([("/hooks/run-1", str(own.id)), ("/hooks/kinds", str(other.id))])
        own_request = next(r for r in receiver.requests if r.path == "/hooks/run-1")
        assert signature_valid(secret, own_request)
    assert kinds.subscribed


def test_a_token_subscription_ends_with_the_token(local, django_user_model) -> None:
    from runqueue import tokens

    user = django_user_model.objects.create_user("api")
    token, _raw = tokens.issue(user=user, tenant="acme")
    with receiving() as receiver:
        webhooks.create_endpoint(receiver.url, token=token)
        finish(tenant="acme", principal=f"user:{user.pk}")
        finish(tenant="acme", principal="user:someone-else")
        tokens.revoke(token)
        finish(tenant="acme", principal=f"user:{user.pk}")
        assert WebhookDelivery.objects.count() == 1


def test_rotated_secret_signs_beside_the_new_one_for_the_overlap(local) -> None:
    with receiving() as receiver:
        endpoint, old = webhooks.create_endpoint(receiver.url)
        new = webhooks.rotate_secret(endpoint, overlap=3600)
        finish()
        deliver_due()
        (got,) = receiver.requests
        assert len(got.headers["webhook-signature"].split(" ")) == 2
        assert signature_valid(old, got) and signature_valid(new, got)
        endpoint.previous_secret_until = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        endpoint.save(update_fields=["previous_secret_until"])
        finish()
        deliver_due()
        assert signature_valid(new, receiver.requests[-1])
        assert not signature_valid(old, receiver.requests[-1])


def test_no_endpoint_writes_nothing() -> None:
    finish()
    finish(how="fail")
    assert not WebhookDelivery.objects.exists() and attempt_runs() == []


def test_a_deliverys_own_run_reports_nothing(local) -> None:
    with receiving(then="500") as receiver:
        webhooks.create_endpoint(receiver.url, max_attempts=1)
        finish()
        assert deliver_due() == ["failed"]  # its dead letter is no event of its own
        assert WebhookDelivery.objects.count() == 1
        assert isinstance(receiver, Receiver)


def test_the_docs_receiver_verifies_and_dedupes_a_real_delivery(local, settings) -> None:
    """docs/operations.md's receiver, with the standardwebhooks library,
    takes a delivery runqueue made, once per webhook-id, and refuses a
    tampered body."""
    from django.test import RequestFactory

    from tests.database.docs.docs_blocks import named

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with receiving() as receiver:
        _, secret = webhooks.create_endpoint(receiver.url)
        finish()
        deliver_due()
        (got,) = receiver.requests
    code = named("webhook-receiver").code.replace("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", secret)
    handled: list[str] = []
    namespace: dict[str, Any] = {"print": lambda *a: handled.append(a[0])}
    exec(compile(code, "docs/operations.md", "exec"), namespace)  # noqa: S102 - the docs' code
    view = namespace["runqueue_events"]
    factory = RequestFactory()
    extra = {
        "HTTP_" + k.upper().replace("-", "_"): v
        for k, v in got.headers.items()
        if k.startswith("webhook-")
    }

    def post(body: bytes) -> int:
        request = factory.post("/hook", body, content_type="application/json", **extra)
        return view(request).status_code

    assert post(got.body) == 204
    assert post(got.body) == 204  # the same webhook-id again: handled once
    assert handled == ["run.succeeded"]
    assert post(got.body.replace(b"succeeded", b"cancelled")) == 400
