"""The webhooks' row trigger on the runs table exists exactly while an
active endpoint does (runqueue_webhook_sync, migration 0032): a queue with
no webhook pays nothing per transition, and two transactions that change
the endpoints at once cannot leave it off while an endpoint is active."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from runqueue import webhooks
from runqueue.models import WebhookDelivery, WebhookEndpoint
from tests.database.webhooks.test_webhooks import ALLOW_LOCAL, finish
from tests.helpers import Worker, is_blocked, wait_until

URL = "http://127.0.0.1:9/hooks"


def trigger_present() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'runqueue_run'::regclass"
            " AND tgname = 'runqueue_run_webhook')"
        )
        return cursor.fetchone()[0]


@pytest.fixture
def local(settings) -> None:
    settings.RUNQUEUE = dict(ALLOW_LOCAL)


@pytest.mark.django_db
def test_the_trigger_follows_the_active_endpoints(local) -> None:
    assert not trigger_present()
    first, _ = webhooks.create_endpoint(URL)
    assert trigger_present()
    second, _ = webhooks.create_endpoint(URL + "/b")
    WebhookEndpoint.objects.filter(pk=first.pk).update(active=False)
    assert trigger_present()  # the second is still active
    second.active = False
    second.save()
    assert not trigger_present()
    finish()
    assert not WebhookDelivery.objects.exists()
    first.active = True
    first.save()
    assert trigger_present()
    finish()
    assert WebhookDelivery.objects.filter(endpoint=first).count() == 1
    WebhookEndpoint.objects.all().delete()
    assert not trigger_present()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first_writer", ["deactivates", "adds"])
def test_racing_endpoint_writes_leave_the_trigger_on(local, first_writer: str) -> None:
    """One transaction deactivates the only active endpoint while another
    adds one: whichever writes first, the second waits for it to commit and
    then reads what it wrote, so the trigger is on when both are done (read
    without the wait, each would see the other's endpoint as it was)."""
    old, _ = webhooks.create_endpoint(URL)
    assert trigger_present()
    release = threading.Event()

    def deactivate() -> None:
        with transaction.atomic():
            WebhookEndpoint.objects.filter(pk=old.pk).update(active=False)
            if first_writer == "deactivates":
                release.wait(30)

    def add() -> WebhookEndpoint:
        with transaction.atomic():
            endpoint, _ = webhooks.create_endpoint(URL + "/new")
            if first_writer == "adds":
                release.wait(30)
        return endpoint

    first, second = (deactivate, add) if first_writer == "deactivates" else (add, deactivate)
    holder = Worker(first, name="first")
    holder.start()
    # The first holds its transaction open once its statement has synced.
    wait_until(lambda: _sync_done_by(holder), what="the first writer's sync")
    waiter = Worker(second, name="second")
    waiter.start()
    waiter.started_fn.wait(30)
    wait_until(lambda: is_blocked(waiter.backend_pid), what="the second writer to wait")
    release.set()
    holder.outcome()
    waiter.outcome()
    assert trigger_present()
    run = finish()
    added = WebhookEndpoint.objects.get(active=True)
    assert list(WebhookDelivery.objects.values_list("endpoint_id", "run_id")) == [
        (added.pk, run.pk)
    ]


def _sync_done_by(worker: Worker) -> bool:
    """The worker's transaction holds the sync's advisory lock."""
    if worker.backend_pid is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory'"
            " AND pid = %s AND granted)",
            [worker.backend_pid],
        )
        return cursor.fetchone()[0]
