"""What runs may use at once: concurrency limits and model-provider budgets."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from runqueue.limits import BUDGET_KEY_MAX_LENGTH
from runqueue.models.choices import PriorityClass


class ConcurrencyLimit(models.Model):
    """How many runs with one concurrency key may run at once in one class;
    overrides ``RUNQUEUE["CONCURRENCY"]`` for that key. 0 pauses the key."""

    key = models.CharField(
        max_length=255, help_text="A run's concurrency key (by default its tenant)."
    )
    priority_class = models.SmallIntegerField(choices=PriorityClass.choices)
    max_running = models.PositiveIntegerField(
        help_text="Runs of this key that may run (or wait for an expired lease) at once "
        "in this class; 0 pauses the key."
    )
    note = models.CharField(max_length=255, blank=True, default="", help_text="Why this limit.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "runqueue_concurrency_limit"
        ordering = ["key", "priority_class"]
        constraints = [
            models.UniqueConstraint(
                fields=["key", "priority_class"], name="runqueue_concurrency_limit_unique"
            ),
            models.CheckConstraint(
                condition=Q(priority_class__in=PriorityClass.values),
                name="runqueue_concurrency_limit_class_valid",
            ),
            models.CheckConstraint(
                condition=~Q(key=""), name="runqueue_concurrency_limit_key_not_empty"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} / {self.get_priority_class_display()}: {self.max_running}"


class Budget(models.Model):
    """A model provider's rate limit on one key (docs/decisions/queue.md,
    "Budgets"): requests and/or tokens allowed per ``per_seconds``, shared
    by every run that declares the key, with optional per-tenant shares.

    Its use is kept in the same row, in columns the model does not declare
    (migration 0011: a ring of eleven buckets of a tenth of the window each,
    ``ring_*``, and the tenants' passes ``passes``, ``seen``, ``vtime``),
    written only by the database functions ``runqueue_budget_take`` and
    ``runqueue_budget_settle``: a save here never overwrites the window the
    claims are racing on.
    """

    key = models.CharField(
        max_length=BUDGET_KEY_MAX_LENGTH,
        unique=True,
        help_text="What runs declare, e.g. openai:gpt-5 or tenant-7:openai.",
    )
    requests = models.PositiveIntegerField(
        null=True, blank=True, help_text="Calls allowed per window (empty: no limit)."
    )
    tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens allowed per window (empty: no limit)."
    )
    per_seconds = models.PositiveIntegerField(default=60, help_text="The window, in seconds.")
    shares = models.JSONField(
        default=dict,
        blank=True,
        help_text='Per-tenant shares when tenants contend, e.g. {"acme": 2}; '
        "a tenant not listed has 1.",
    )
    paused_until = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="No call is reserved before this."
    )
    note = models.CharField(max_length=255, blank=True, default="", help_text="Why this budget.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "runqueue_budget"
        ordering = ["key"]
        constraints = [
            models.CheckConstraint(condition=~Q(key=""), name="runqueue_budget_key_not_empty"),
            models.CheckConstraint(
                condition=Q(per_seconds__gte=1), name="runqueue_budget_per_seconds_gte_1"
            ),
        ]
        permissions = [("pause_budget", "Can pause and resume a budget")]

    def __str__(self) -> str:
        return self.key

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        problem = shares_problem(self.shares)
        if problem is not None:
            raise ValidationError({"shares": problem})
        if self.requests is None and self.tokens is None:
            raise ValidationError("A budget limits requests, tokens or both.")


#: A tenant's share of a budget is within these: a pass grows by what it
#: reserves divided by its share (runqueue_budget_take), and a share near 0
#: (1e-320) overflows float8 there, failing every claim of the key.
SHARE_MIN = 0.001
SHARE_MAX = 1_000_000


def shares_problem(shares: object) -> str | None:
    """Why ``shares`` is not {tenant: number from SHARE_MIN to SHARE_MAX}, or None."""
    if not isinstance(shares, dict):
        return f"must be an object of tenant: share, got {type(shares).__name__}"
    for tenant, share in shares.items():
        if not isinstance(tenant, str) or not tenant:
            return f"tenants must be non-empty strings, got {tenant!r}"
        if (
            isinstance(share, bool)
            or not isinstance(share, int | float)
            or not SHARE_MIN <= share <= SHARE_MAX
        ):
            return (
                f"the share of {tenant!r} must be a number from {SHARE_MIN} to "
                f"{SHARE_MAX:,}, got {share!r}"
            )
    return None
