"""Outbound webhooks (docs/operations.md, "Webhooks"; docs/decisions/schedules-webhooks.md,
"Webhooks"): endpoints and their secrets, a submit's own URL, the SSRF
rule, and the maintenance kind that sends each delivery.

An event's deliveries are written by the database in the event's own
transaction (``runqueue_webhook_enqueue``, fn_webhooks.sql), each with the
maintenance run that sends it (``runqueue.webhooks.sending``);
``addresses`` holds where a webhook may go and the connection that goes
there, ``targets`` which endpoint signs a submit's own URL, ``endpoints``
what people call. No module here writes run state but through the submit
and the operator's requeue.
"""

from runqueue.webhooks.addresses import UrlRefused
from runqueue.webhooks.endpoints import (
    create_endpoint,
    new_secret,
    prepare_endpoint,
    resend,
    rotate_secret,
)
from runqueue.webhooks.targets import endpoint_for

__all__ = [
    "UrlRefused",
    "create_endpoint",
    "endpoint_for",
    "new_secret",
    "prepare_endpoint",
    "resend",
    "rotate_secret",
]
