"""Model calls' tokens and cost, per run and per run tree."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runqueue.limits import (
    COST_DIGITS,
    COST_PLACES,
    KIND_MAX_LENGTH,
    TENANT_MAX_LENGTH,
    USAGE_MODEL_MAX_LENGTH,
)
from runqueue.models.run_keys import run_key, run_primary_key


class Usage(models.Model):
    """One model call's tokens and cost, as a handler recorded it
    (``ctx.record_usage``): kept per run, with the run's tree root, tenant
    and the root's session copied in, so a tree, a session and a tenant sum
    through an index. Written without the lease's fence (the money was
    spent), once per (run, lease epoch, call): a write retried, or made
    again by a fenced worker's same call, counts once (docs/decisions/run-trees.md,
    "Usage and cost")."""

    run = run_key("usage", db_index=False)
    #: The run's tree root when it was recorded (itself for a root).
    root_id = models.UUIDField()
    tenant = models.CharField(max_length=TENANT_MAX_LENGTH)
    #: The root's session (NULL outside one): a session's total.
    session_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    kind = models.CharField(max_length=KIND_MAX_LENGTH)
    lease_epoch = models.BigIntegerField()
    #: The handler's n-th ``record_usage`` under this lease (from 0).
    call = models.IntegerField()
    attempt = models.IntegerField()
    model = models.CharField(max_length=USAGE_MODEL_MAX_LENGTH)
    input_tokens = models.BigIntegerField()
    output_tokens = models.BigIntegerField()
    #: NULL: unknown (no cost given and no price for the model).
    cost = models.DecimalField(max_digits=COST_DIGITS, decimal_places=COST_PLACES, null=True)
    #: The recording lease no longer held the run (fenced or cancelled):
    #: still counted.
    fenced = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_usage"
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "lease_epoch", "call"], name="runqueue_usage_once"
            ),
            models.CheckConstraint(
                condition=Q(input_tokens__gte=0, output_tokens__gte=0, call__gte=0),
                name="runqueue_usage_counts_gte_0",
            ),
            models.CheckConstraint(
                condition=Q(cost__isnull=True) | Q(cost__gte=0), name="runqueue_usage_cost_gte_0"
            ),
        ]
        indexes = [
            models.Index(fields=["root_id"], name="runqueue_usage_root_idx"),
            models.Index(fields=["tenant", "session_id"], name="runqueue_usage_session_idx"),
            models.Index(fields=["tenant", "created_at"], name="runqueue_usage_tenant_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.input_tokens}+{self.output_tokens} for {self.run_id}"


class TreeSpend(models.Model):
    """A run tree's totals and spend cap, keyed by its root run: every
    usage recorded in the tree adds here in the same statement, under this
    row's lock, so the one call that takes the cost to the cap is known
    (docs/decisions/run-trees.md, "Usage and cost")."""

    run = run_primary_key("tree_spend")
    #: The tree ends (reason spend_cap) once its cost reaches this; NULL: no cap.
    spend_cap = models.DecimalField(
        max_digits=COST_DIGITS, decimal_places=COST_PLACES, null=True, blank=True
    )
    cost = models.DecimalField(max_digits=COST_DIGITS, decimal_places=COST_PLACES, default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    calls = models.BigIntegerField(default=0)
    #: Calls recorded without a cost (no cost given, no price): not in ``cost``.
    unpriced_calls = models.BigIntegerField(default=0)
    #: When the cost reached the cap (the tree was ended then).
    capped_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_tree_spend"
        constraints = [
            models.CheckConstraint(
                condition=Q(spend_cap__isnull=True) | Q(spend_cap__gt=0),
                name="runqueue_tree_spend_cap_gt_0",
            ),
        ]

    def __str__(self) -> str:
        return f"spend of the tree of {self.run_id}"
