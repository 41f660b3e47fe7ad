"""The HTTP API's bearer tokens and their submit quotas."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runqueue.limits import TENANT_MAX_LENGTH
from runqueue.models.choices import PriorityClass


class ApiToken(models.Model):
    """A bearer token for the HTTP API: bound to a user (the principal) and a
    tenant. Only a hash is stored; ``prefix`` finds the row. It may submit at
    most ``max_priority_class`` and ``submit_quota`` runs per window."""

    name = models.CharField(max_length=255, blank=True, default="")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runqueue_api_tokens"
    )
    tenant = models.CharField(max_length=TENANT_MAX_LENGTH, default="default")
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    max_priority_class = models.SmallIntegerField(
        choices=PriorityClass.choices,
        default=PriorityClass.ASYNC,
        verbose_name="highest priority class",
        help_text="The most urgent class this token may submit to.",
    )
    submit_quota = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=60,
        help_text="Submits allowed per window; empty for no quota.",
    )
    submit_window_seconds = models.PositiveIntegerField(
        default=60, help_text="The quota's window, in seconds."
    )

    class Meta:
        db_table = "runqueue_api_token"
        verbose_name = "API token"
        constraints = [
            models.CheckConstraint(
                condition=Q(max_priority_class__in=PriorityClass.values),
                name="runqueue_api_token_class_valid",
            ),
            models.CheckConstraint(
                condition=Q(submit_window_seconds__gte=1),
                name="runqueue_api_token_window_gte_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name or self.prefix} ({self.tenant})"


class ApiTokenQuota(models.Model):
    """A token's submit quota state: the theoretical arrival time of the
    next submit (GCRA), so "N per window" holds over any window."""

    token = models.OneToOneField(
        ApiToken, on_delete=models.CASCADE, primary_key=True, related_name="quota_state"
    )
    tat = models.DateTimeField()
    admitted = models.BooleanField(default=True)

    class Meta:
        db_table = "runqueue_api_token_quota"

    def __str__(self) -> str:
        return f"quota of {self.token_id}"
