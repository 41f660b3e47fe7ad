"""Inbound events (docs/decisions/schedules-webhooks.md, "Inbound events"): what other systems
sent (``POST /api/events/<name>/``, ``runqueue.send_event``), which runs
took which event, and the triggers staff declare in the admin.

An event is kept ``EVENT_RETENTION_SECONDS``: its row is what makes a
repeated delivery a replay (unique per tenant, name and key) and what a
wait that begins after it arrived finds (the retention window).
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from runqueue.limits import KIND_MAX_LENGTH, TENANT_MAX_LENGTH
from runqueue.models.choices import PriorityClass
from runqueue.models.run_keys import run_key

#: The longest event name and key: their columns' length.
EVENT_NAME_MAX_LENGTH = 255
EVENT_KEY_MAX_LENGTH = 255


class InboundEvent(models.Model):
    """One event another system sent, once per (tenant, name, key)."""

    tenant = models.CharField(max_length=TENANT_MAX_LENGTH)
    name = models.CharField(max_length=EVENT_NAME_MAX_LENGTH)
    #: The sender's Idempotency-Key (or the body field the project names):
    #: a second delivery with the same key is the first one again.
    key = models.CharField(max_length=EVENT_KEY_MAX_LENGTH)
    data = models.JSONField(default=dict)
    received_at = models.DateTimeField(db_default=Now())
    #: Who sent it (the API caller's principal; "" from Python).
    principal = models.CharField(max_length=255, blank=True, default="")
    #: The runs its triggers started: [{"trigger": ..., "run": id}].
    started = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "runqueue_inbound_event"
        ordering = ["-id"]
        verbose_name = "inbound event"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name", "key"], name="runqueue_inbound_event_key"
            )
        ]
        indexes = [
            # A wait's look back: the tenant's events of a name, by arrival.
            models.Index(
                fields=["tenant", "name", "received_at"], name="runqueue_inbound_name_idx"
            ),
            # Retention's prune, oldest first.
            models.Index(fields=["received_at"], name="runqueue_inbound_age_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.key}"


class EventDelivery(models.Model):
    """An event a run took (a wait it ended): a wait never takes the same
    event twice. Goes with its event (retention) or its run (``DEPENDANTS``
    of ``runqueue.history.partitions``)."""

    # The unique (run, event) index serves lookups by run.
    run = run_key("event_deliveries", db_index=False)
    event = models.ForeignKey(InboundEvent, on_delete=models.CASCADE, related_name="deliveries")
    delivered_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_event_delivery"
        constraints = [
            models.UniqueConstraint(fields=["run", "event"], name="runqueue_event_delivery_once")
        ]

    def __str__(self) -> str:
        return f"event {self.event_id} to {self.run_id}"


class EventTrigger(models.Model):
    """A trigger declared in the admin: each event of ``name`` whose data
    contains ``match`` (PostgreSQL's ``@>``) starts a run of ``kind``."""

    name = models.CharField(max_length=EVENT_NAME_MAX_LENGTH, help_text="The event's name.")
    match = models.JSONField(
        default=dict,
        blank=True,
        help_text='A JSON object the event\'s data must contain, e.g. {"plan": "pro"}; '
        "{} matches every event of the name.",
    )
    kind = models.CharField(max_length=KIND_MAX_LENGTH, help_text="The kind of run it starts.")
    priority = models.PositiveSmallIntegerField(
        default=int(PriorityClass.ASYNC), help_text="The started run's priority."
    )
    tenant = models.CharField(
        max_length=TENANT_MAX_LENGTH,
        blank=True,
        default="",
        help_text="Only this tenant's events; empty for every tenant's.",
    )
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_event_trigger"
        ordering = ["name", "id"]
        indexes = [models.Index(fields=["name"], name="runqueue_trigger_name_idx")]

    def __str__(self) -> str:
        return f"{self.name} -> {self.kind}"
