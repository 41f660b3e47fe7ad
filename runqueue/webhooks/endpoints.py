"""Endpoints and their secrets (create, check, rotate) and sending a
delivery again: what people call, through the admin or Python."""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from runqueue import leases
from runqueue.conf import get_settings
from runqueue.errors import InvalidTransition
from runqueue.models import (
    WEBHOOK_EVENTS,
    PriorityClass,
    RunStatus,
    WebhookDelivery,
    WebhookEndpoint,
)
from runqueue.submission.submit import submit_in_transaction
from runqueue.tokens import principal_of
from runqueue.webhooks.addresses import check
from runqueue.webhooks.sending import DELIVER

if TYPE_CHECKING:
    from runqueue.models import ApiToken

#: Random bytes in a secret (Standard Webhooks asks for 24 to 64).
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh ``whsec_`` secret: base64 of random bytes, as Standard
    Webhooks writes them (its libraries take it as is)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _filters_problem(endpoint: WebhookEndpoint) -> str | None:
    kinds, types = endpoint.kinds, endpoint.event_types
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k for k in kinds):
        return "kinds must be a list of kinds"
    if not isinstance(types, list) or not set(types) <= set(WEBHOOK_EVENTS):
        return "event_types must be a list of: " + ", ".join(WEBHOOK_EVENTS)
    return None


def prepare_endpoint(endpoint: WebhookEndpoint) -> str | None:
    """Check an endpoint before it is saved (UrlRefused, ValueError), take
    its token's tenant and principal, and give a new one its secret: the
    secret is returned, to be shown once (None for one that has a secret)."""
    check(endpoint.url)
    if (problem := _filters_problem(endpoint)) is not None:
        raise ValueError(problem)
    token: ApiToken | None = endpoint.token
    if token is not None:
        endpoint.tenant, endpoint.principal = token.tenant, principal_of(token.user)
    else:
        endpoint.principal = ""
    if endpoint.secret:
        return None
    endpoint.secret = new_secret()
    return endpoint.secret


def create_endpoint(
    url: str,
    *,
    name: str = "",
    tenant: str = "",
    subscribed: bool = True,
    kinds: Iterable[str] = (),
    event_types: Iterable[str] = (),
    token: ApiToken | None = None,
    max_attempts: int = 12,
) -> tuple[WebhookEndpoint, str]:
    """A new endpoint and its secret (give it to the receiver; runqueue
    shows it nowhere again). Raises UrlRefused or ValueError, writing nothing."""
    endpoint = WebhookEndpoint(
        url=url,
        name=name,
        tenant=tenant,
        subscribed=subscribed,
        kinds=list(kinds),
        event_types=list(event_types),
        token=token,
        max_attempts=max_attempts,
    )
    secret = prepare_endpoint(endpoint)
    assert secret is not None
    endpoint.full_clean(exclude=["secret"])
    endpoint.save()
    return endpoint, secret


def rotate_secret(endpoint: WebhookEndpoint, *, overlap: float | None = None) -> str:
    """A new secret for the endpoint, returned once. The old one keeps
    signing beside it for ``overlap`` seconds (default
    ``WEBHOOK_SECRET_OVERLAP_SECONDS``): a receiver that still holds it
    verifies every delivery meanwhile."""
    seconds = get_settings().WEBHOOK_SECRET_OVERLAP_SECONDS if overlap is None else overlap
    secret = new_secret()
    with transaction.atomic():
        row = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
        row.previous_secret, row.secret = row.secret, secret
        row.previous_secret_until = timezone.now() + dt.timedelta(seconds=seconds)
        row.save(update_fields=["secret", "previous_secret", "previous_secret_until"])
    endpoint.secret, endpoint.previous_secret = row.secret, row.previous_secret
    endpoint.previous_secret_until = row.previous_secret_until
    return secret


def resend(delivery: WebhookDelivery, *, actor: str) -> WebhookDelivery:
    """Send a delivery again, the same ``webhook-id`` and body: a dead one's
    run is requeued (a fresh set of tries); a delivered one gets a new run.
    A delivery still being tried raises InvalidTransition."""
    status = delivery.attempt_run.status
    if status == RunStatus.FAILED:
        leases.requeue(delivery.attempt_run_id, actor=actor, reason="webhook resend")
        return delivery
    with transaction.atomic():
        row = (
            WebhookDelivery.objects.select_for_update()
            .select_related("endpoint")
            .get(pk=delivery.pk)
        )
        status = row.attempt_run.status
        if status not in (RunStatus.SUCCEEDED, RunStatus.CANCELLED):
            raise InvalidTransition(row.attempt_run_id, status, "resend")
        run = submit_in_transaction(
            kind=DELIVER,
            payload={"delivery": row.pk},
            tenant="runqueue",
            priority=PriorityClass.MAINTENANCE,
            max_attempts=row.endpoint.max_attempts,
        ).run
        row.attempt_run_id = run.id
        row.save(update_fields=["attempt_run"])
    return row
