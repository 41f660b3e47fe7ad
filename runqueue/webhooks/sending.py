"""One try of one delivery: the maintenance kind ``runqueue.webhook``.

Each delivery is a run of this kind, written with the event it reports
(``runqueue_webhook_enqueue``, fn_webhooks.sql). A try signs the stored body
afresh (a new ``webhook-timestamp``, the same ``webhook-id``) with the
``standardwebhooks`` library, posts it once and ends: a 2xx succeeds the
run, anything else is a ``TransientError`` whose ``retry_after`` is the
delivery's backoff (5 s doubling, at most a day, later if the receiver's
``Retry-After`` asks), so the queue's own retries, dead letter and requeue
are the delivery's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from django.db.models import F
from django.db.models.functions import Now
from standardwebhooks.webhooks import Webhook

from runqueue.conf import get_settings
from runqueue.errors import PermanentError, TransientError
from runqueue.models import WebhookDelivery, WebhookEndpoint
from runqueue.registry import handler
from runqueue.runtime import RunContext
from runqueue.webhooks import addresses

DELIVER = "runqueue.webhook"
#: The first retry's delay, doubled each try, and the longest.
BACKOFF_BASE_SECONDS = 5
BACKOFF_MAX_SECONDS = 86400
#: The most of an error kept on the delivery.
ERROR_MAX_CHARS = 500

logger = logging.getLogger("runqueue.webhooks")


def retry_delay(attempt: int, retry_after: float | None = None) -> float:
    """Seconds before the try after try number ``attempt`` (1 first): 5 s
    × 2^(attempt-1), at most a day; a longer ``Retry-After`` wins, up to
    the same day."""
    delay = BACKOFF_BASE_SECONDS * 2.0 ** min(max(attempt - 1, 0), 32)
    return min(max(delay, retry_after or 0.0), BACKOFF_MAX_SECONDS)


def secrets_of(endpoint: WebhookEndpoint, now: dt.datetime) -> list[str]:
    """The secrets that sign now: the current one, and the one rotated out
    while its overlap lasts."""
    keys = [endpoint.secret]
    until = endpoint.previous_secret_until
    if endpoint.previous_secret and until is not None and until > now:
        keys.append(endpoint.previous_secret)
    return keys


def signed_headers(
    endpoint: WebhookEndpoint, message_id: str, body: str, now: dt.datetime
) -> dict[str, str]:
    """The Standard Webhooks headers of one try: one ``v1`` signature per
    live secret, space-separated (a receiver accepts any one)."""
    signatures = [Webhook(key).sign(message_id, now, body) for key in secrets_of(endpoint, now)]
    return {
        "Content-Type": "application/json",
        "User-Agent": "runqueue-webhooks",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": " ".join(signatures),
    }


def body_text(delivery: WebhookDelivery) -> str:
    """The body as sent, the same on every try."""
    return json.dumps(delivery.body, separators=(",", ":"), ensure_ascii=False)


def _record(delivery: WebhookDelivery, status: int | None, error: str, *, ok: bool) -> None:
    """What the try did, on the delivery's row (for the console)."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        attempts=F("attempts") + 1,
        last_status=status,
        last_error=error[:ERROR_MAX_CHARS],
        last_attempt_at=Now(),
        **({"delivered_at": Now()} if ok else {}),
    )


@handler(DELIVER)
def deliver(ctx: RunContext) -> dict:
    """Post one delivery once; succeed on a 2xx, else retry with backoff."""
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    pk = payload.get("delivery")
    delivery = None
    if isinstance(pk, int):
        delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=pk).first()
    if delivery is None:
        raise PermanentError(f"webhook delivery {pk!r} does not exist")
    endpoint = delivery.endpoint
    if not endpoint.active:
        _record(delivery, None, "endpoint disabled", ok=False)
        raise PermanentError(f"webhook endpoint {endpoint.pk} is disabled")
    body = body_text(delivery)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    headers = signed_headers(endpoint, delivery.message_id, body, now)
    timeout = get_settings().WEBHOOK_TIMEOUT_SECONDS
    try:
        answer = addresses.post(delivery.url, body.encode(), headers, timeout)
    except addresses.UrlRefused as exc:
        _record(delivery, None, f"refused: {exc}", ok=False)
        raise PermanentError(f"webhook URL refused: {exc}") from exc
    except OSError as exc:
        _record(delivery, None, f"{type(exc).__name__}: {exc}", ok=False)
        raise TransientError(
            f"webhook post failed: {exc!r}", retry_after=retry_delay(ctx.attempt)
        ) from exc
    ok = 200 <= answer.status < 300
    _record(delivery, answer.status, "" if ok else answer.text, ok=ok)
    if not ok:
        raise TransientError(
            f"webhook receiver answered {answer.status}",
            retry_after=retry_delay(ctx.attempt, answer.retry_after),
        )
    return {"delivery": delivery.pk, "status": answer.status}
