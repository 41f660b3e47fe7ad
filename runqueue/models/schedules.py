"""Scheduled work: schedules and their ticks, paused kinds, queue events."""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

from runqueue.limits import KIND_MAX_LENGTH, TENANT_MAX_LENGTH
from runqueue.models.api_tokens import ApiToken
from runqueue.models.choices import PriorityClass
from runqueue.models.runs import Run


class CatchUp(models.TextChoices):
    """What a schedule does with ticks missed while no worker ran."""

    LATEST = "latest", "Latest missed tick only"
    ALL = "all", "Every missed tick (capped)"
    NONE = "none", "No missed tick"


class ScheduleSource(models.TextChoices):
    SETTINGS = "settings", "RUNQUEUE['SCHEDULES']"
    ADMIN = "admin", "Admin"
    #: Made over the HTTP API (``POST /api/schedules/``), owned by its token.
    API = "api", "HTTP API"
    #: Made by a handler (``ctx.schedule``).
    HANDLER = "handler", "Handler (ctx.schedule)"


class Overlap(models.TextChoices):
    """What a schedule's tick does while a run of an earlier tick is still active."""

    SKIP = "skip", "Skip the tick while the last run is active"
    ALLOW = "allow", "Fire anyway: runs may overlap"
    CANCEL_PREVIOUS = "cancel_previous", "Fire, and cancel the runs still active"


class TickOutcome(models.TextChoices):
    FIRED = "fired", "Fired"
    SKIPPED = "skipped", "Skipped"
    #: Not fired: a run of an earlier tick was still active (overlap "skip").
    OVERLAPPED = "overlapped", "Skipped: the last run was still active"
    #: Not a tick of the cron: staff's Run now, listed with the schedule's runs.
    RUN_NOW = "run_now", "Run now"
    #: Not fired: its session was busy and its on_busy refused the turn
    #: (``reject``, or the session's line full).
    BUSY = "busy", "Skipped: the session was busy"


class ScheduleQuerySet(models.QuerySet):
    def active(self) -> ScheduleQuerySet:
        return self.filter(paused_at__isnull=True, retired_at__isnull=True)

    def due(self, now: dt.datetime) -> ScheduleQuerySet:
        return self.active().filter(next_fire_at__lte=now)

    def live(self) -> ScheduleQuerySet:
        """Schedules that may still fire: all but one-shots already handled
        (what the API's and handlers' limits count)."""
        return self.exclude(run_at__isnull=False, handled_until__gte=F("run_at"))


class Schedule(models.Model):
    """A recurring run: a cron expression in a time zone, and what to submit;
    or a one-shot (``run_at``, no cron), which fires once.

    ``handled_until`` is the cursor: every tick at or before it was fired or
    skipped. ``next_fire_at`` is the first tick after it, indexed, so each
    worker's periodic look for due schedules is one small index read.
    """

    name = models.CharField(max_length=100, unique=True)
    source = models.CharField(
        max_length=10, choices=ScheduleSource, default=ScheduleSource.ADMIN, editable=False
    )
    cron = models.CharField(
        max_length=255,
        blank=True,
        help_text="Five fields: minute hour day month weekday (empty for a one-shot).",
    )
    #: A one-shot's time (then ``cron`` is empty).
    run_at = models.DateTimeField(null=True, blank=True, editable=False)
    timezone = models.CharField(max_length=64, default="UTC")
    kind = models.CharField(max_length=KIND_MAX_LENGTH)
    payload = models.JSONField(default=dict, blank=True)
    priority = models.SmallIntegerField(default=PriorityClass.MAINTENANCE)
    tenant = models.CharField(max_length=TENANT_MAX_LENGTH, default="default")
    max_attempts = models.IntegerField(null=True, blank=True)
    catch_up = models.CharField(max_length=10, choices=CatchUp, default=CatchUp.LATEST)
    catch_up_limit = models.IntegerField(
        default=10, help_text="With catch-up 'all': at most this many missed ticks fire."
    )
    overlap = models.CharField(
        max_length=16,
        choices=Overlap,
        default=Overlap.SKIP,
        db_default=Overlap.SKIP,
        help_text="When a tick comes while a run of an earlier tick is still queued, running "
        "or waiting: skip the tick, fire anyway, or fire and cancel the earlier run.",
    )
    #: Aimed at a session: each run is a turn of it, submitted with on_busy.
    session_id = models.CharField(  # noqa: DJ001 - NULL: no session, as on runs
        max_length=255, null=True, blank=True, editable=False
    )
    on_busy = models.CharField(  # noqa: DJ001 - NULL: submit's default
        max_length=16, null=True, blank=True, editable=False
    )
    #: Its runs (and their children) may call ``ctx.schedule``.
    runs_may_schedule = models.BooleanField(default=False, db_default=False, editable=False)
    #: The API token that made it (its limit counts it); the principal or
    #: run that made it, for the record.
    token = models.ForeignKey(
        ApiToken,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="schedules",
        editable=False,
    )
    created_by = models.CharField(max_length=255, blank=True, default="", editable=False)
    handled_until = models.DateTimeField(editable=False)
    next_fire_at = models.DateTimeField(null=True, blank=True, editable=False)
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    paused_by = models.CharField(max_length=255, blank=True, default="", editable=False)
    pause_reason = models.CharField(max_length=500, blank=True, default="", editable=False)
    retired_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(auto_now=True)

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        db_table = "runqueue_schedule"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=~Q(name=""), name="runqueue_schedule_name_not_empty"),
            models.CheckConstraint(
                condition=Q(catch_up__in=CatchUp.values), name="runqueue_schedule_catch_up_valid"
            ),
            models.CheckConstraint(
                condition=Q(overlap__in=Overlap.values), name="runqueue_schedule_overlap_valid"
            ),
            models.CheckConstraint(
                condition=Q(catch_up_limit__gte=1, catch_up_limit__lte=1000),
                name="runqueue_schedule_catch_up_limit_range",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0), name="runqueue_schedule_priority_gte_0"
            ),
            models.CheckConstraint(
                condition=(Q(run_at__isnull=True) & ~Q(cron=""))
                | (Q(run_at__isnull=False) & Q(cron="")),
                name="runqueue_schedule_cron_or_run_at",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                condition=Q(paused_at__isnull=True, retired_at__isnull=True),
                name="runqueue_schedule_due_idx",
            ),
        ]
        permissions = [("operate_schedule", "Can pause, resume or run a schedule now")]

    def __str__(self) -> str:
        return self.name

    @property
    def principal(self) -> str:
        """The principal of the runs this schedule makes: they carry its name."""
        return f"schedule:{self.name}"


class ScheduleTick(models.Model):
    """One tick of a schedule, fired (with its run) or skipped by catch-up.

    The unique (schedule, tick_at) is what makes a tick fire once however
    many workers race for it. A skipped row stands for every tick t with
    ``tick_at <= t < skipped_before``.
    """

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="ticks")
    tick_at = models.DateTimeField()
    outcome = models.CharField(max_length=10, choices=TickOutcome)
    run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="schedule_ticks",
        db_constraint=False,
    )
    skipped_before = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_schedule_tick"
        ordering = ["-tick_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "tick_at"], name="runqueue_schedule_tick_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.tick_at} ({self.outcome})"


class PausedKind(models.Model):
    """A kind the claim skips, in one priority class or (NULL) in all.

    Its queued runs wait; running ones finish. The runs table is not written.
    """

    kind = models.CharField(max_length=KIND_MAX_LENGTH)
    priority_class = models.SmallIntegerField(
        null=True, blank=True, choices=PriorityClass, help_text="Empty: every class."
    )
    paused_by = models.CharField(max_length=255)
    reason = models.CharField(max_length=500)
    paused_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_paused_kind"
        ordering = ["kind", "priority_class"]
        verbose_name = "paused kind"
        constraints = [
            # Two partial constraints: NULLS NOT DISTINCT needs PostgreSQL 15.
            models.UniqueConstraint(
                fields=["kind"],
                condition=Q(priority_class__isnull=True),
                name="runqueue_paused_kind_all_classes",
            ),
            models.UniqueConstraint(
                fields=["kind", "priority_class"],
                condition=Q(priority_class__isnull=False),
                name="runqueue_paused_kind_one_class",
            ),
            models.CheckConstraint(
                condition=Q(priority_class__isnull=True)
                | Q(priority_class__in=PriorityClass.values),
                name="runqueue_paused_kind_class_valid",
            ),
            models.CheckConstraint(condition=~Q(kind=""), name="runqueue_paused_kind_not_empty"),
        ]
        permissions = [("pause_kind", "Can pause and resume a kind")]

    def __str__(self) -> str:
        where = (
            PriorityClass(self.priority_class).label
            if self.priority_class is not None
            else "all classes"
        )
        return f"{self.kind} ({where})"


class QueueEvent(models.Model):
    """Events about the queue rather than one run: kind.paused, kind.resumed,
    schedule.paused, schedule.resumed, schedule.run_now."""

    type = models.CharField(max_length=64)
    subject = models.CharField(max_length=255)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_queue_event"
        ordering = ["-id"]
        indexes = [models.Index(fields=["subject", "id"], name="runqueue_queue_event_subj_idx")]

    def __str__(self) -> str:
        return f"{self.type} {self.subject}"
