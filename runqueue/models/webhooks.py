"""Outbound webhooks: the endpoints that receive run events, the per-submit
URLs a run names, and each event's delivery to one URL.

A delivery row and the maintenance run that sends it are written by a
trigger in the transaction of the transition they report
(``runqueue_webhook_run``, ``runqueue_webhook_event``; migration 0028), so
an event that commits has its deliveries and one that rolls back has none
(docs/decisions/schedules-webhooks.md, "Webhooks").
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runqueue.limits import TENANT_MAX_LENGTH
from runqueue.models.api_tokens import ApiToken
from runqueue.models.run_keys import run_key, run_primary_key

#: The events a webhook reports (the ``type`` of its body).
WEBHOOK_EVENTS = (
    "run.succeeded",
    "run.failed",
    "run.cancelled",
    "run.waiting_for_user",
    "tool.uncertain",
)
#: The longest URL an endpoint or a submit may name.
URL_MAX_LENGTH = 2048


class WebhookEndpoint(models.Model):
    """A receiver of run events and the secret that signs what it receives.

    It receives the events of the runs its filters match (``subscribed``:
    its tenant, kinds, token; empty means any), and of the runs submitted
    with a ``webhook`` URL under its own ``url``, signed with its secret.
    A rotated secret is kept as ``previous_secret`` until
    ``previous_secret_until``: meanwhile every delivery carries both
    signatures, so a receiver can switch secrets without losing one.
    """

    name = models.CharField(max_length=255, blank=True, default="")
    url = models.CharField(
        max_length=URL_MAX_LENGTH,
        help_text="Where subscribed events are posted; a submit's webhook URL must start with it.",
    )
    tenant = models.CharField(
        max_length=TENANT_MAX_LENGTH,
        blank=True,
        default="",
        help_text="The tenant whose runs it receives; empty for every tenant.",
    )
    subscribed = models.BooleanField(
        default=True,
        help_text="Receive the events of every run the filters match; off: only of runs "
        "submitted with a webhook URL under this one.",
    )
    kinds = models.JSONField(
        default=list, blank=True, help_text="Kinds whose runs it receives; empty for every kind."
    )
    event_types = models.JSONField(
        default=list, blank=True, help_text="The events it receives; empty for all of them."
    )
    token = models.ForeignKey(
        ApiToken,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhook_endpoints",
        help_text="Only runs submitted by this token's user in its tenant (none once revoked).",
    )
    #: The token's principal, copied when the endpoint is saved (the
    #: trigger matches runs on it without a join to the users).
    principal = models.CharField(max_length=255, blank=True, default="", editable=False)
    max_attempts = models.PositiveSmallIntegerField(
        default=12, help_text="Tries of each delivery before it is dead."
    )
    active = models.BooleanField(default=True)
    secret = models.CharField(max_length=255, editable=False)
    previous_secret = models.CharField(max_length=255, blank=True, default="", editable=False)
    previous_secret_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_webhook_endpoint"
        verbose_name = "webhook endpoint"
        constraints = [
            models.CheckConstraint(condition=~Q(url=""), name="runqueue_webhook_url_not_empty"),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1) & Q(max_attempts__lte=100),
                name="runqueue_webhook_max_attempts_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.url


class WebhookTarget(models.Model):
    """A run's own webhook URL (``submit(webhook=...)``), with the endpoint
    whose secret signs it: written in the run's insert transaction."""

    run = run_primary_key("webhook_target")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="+")
    url = models.CharField(max_length=URL_MAX_LENGTH)

    class Meta:
        db_table = "runqueue_webhook_target"

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    """One event for one URL: the body as it was at the event, its
    ``message_id`` (the ``webhook-id`` header, the same on every attempt),
    and ``attempt_run``, the maintenance run that sends it (its retries,
    backoff and dead letter are that run's)."""

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    url = models.CharField(max_length=URL_MAX_LENGTH)
    run = run_key("+", on_delete=models.DO_NOTHING)
    event_type = models.CharField(max_length=64)
    message_id = models.CharField(max_length=255)
    body = models.JSONField()
    attempt_run = run_key("+", on_delete=models.DO_NOTHING)
    created_at = models.DateTimeField(db_default=Now())
    attempts = models.IntegerField(default=0, db_default=0)
    last_status = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="", db_default="")
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runqueue_webhook_delivery"
        verbose_name_plural = "webhook deliveries"
        ordering = ["-id"]
        permissions = [("resend_delivery", "Can resend a webhook delivery")]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "url", "message_id"], name="runqueue_webhook_delivery_once"
            ),
        ]
        indexes = [
            models.Index(fields=["run"], name="runqueue_webhook_run_idx"),
            models.Index(fields=["attempt_run"], name="runqueue_webhook_attempt_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.message_id} -> {self.url}"
