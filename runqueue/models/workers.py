"""The runworker processes, for the admin's live view."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class Worker(models.Model):
    """A runworker process, for the admin's live view."""

    id = models.CharField(primary_key=True, max_length=255)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    slots = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)
    #: Slots held by a handler told to stop that has not returned yet:
    #: ``[{"run_id", "group", "reason", "held_seconds"}]`` (how long the slot
    #: had been held when the worker wrote ``last_seen_at``, on the worker's
    #: own monotonic clock: no host time is stored).
    cancelled_slots = models.JSONField(default=list, blank=True)
    #: The kinds it has handlers for and their versions, as its claims ask
    #: for them: ``{kind: {"versions": [1, 2], "moves": {"1": 2}}}`` (a run
    #: pinned to 1 moves to 2 at a turn boundary; ``registry.Served.row``).
    kinds = models.JSONField(default=dict, db_default={}, blank=True)

    class Meta:
        db_table = "runqueue_worker"
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return self.id
