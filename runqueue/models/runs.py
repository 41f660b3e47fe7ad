"""The runs table, its read-only named filters and its proxies for the admin."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.apps import apps
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runqueue.limits import BUDGET_KEY_MAX_LENGTH, KIND_MAX_LENGTH, TENANT_MAX_LENGTH
from runqueue.models.choices import (
    ACTIVE_STATUSES,
    LIVE_STATUSES,
    START_BY_STATUSES,
    TERMINAL_STATUSES,
    WAIT_STATUSES,
    PriorityClass,
    RunStatus,
    ToolStatus,
    WaitReason,
)


class RunQuerySet(models.QuerySet):
    """Read-only named filters; writes go through submit and leases."""

    def active(self) -> RunQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def pending(self) -> RunQuerySet:
        """Pending turns, in their sessions' order."""
        return self.filter(status=RunStatus.PENDING).order_by("tenant", "session_id", "place")

    def session_line(self, tenant: str, session_id: str) -> RunQuerySet:
        """A session's live runs in turn order: its active run (if any), then
        its pending turns by place (docs/decisions/sessions.md, "Busy sessions")."""
        return self.filter(
            tenant=tenant, session_id=session_id, status__in=LIVE_STATUSES
        ).order_by(
            models.Case(
                models.When(status=RunStatus.PENDING, then=1),
                default=0,
                output_field=models.IntegerField(),
            ),
            "place",
        )

    def dead_lettered(self) -> RunQuerySet:
        return self.filter(status=RunStatus.FAILED)

    def uncertain(self) -> RunQuerySet:
        """Runs with an uncertain tool invocation no operator has resolved yet."""
        # The records' model by name: it imports this module for its foreign key.
        tool_invocations = apps.get_model("runqueue", "ToolInvocation")
        unresolved = tool_invocations.objects.filter(
            run=models.OuterRef("pk"), status=ToolStatus.UNCERTAIN, resolution__isnull=True
        )
        return self.filter(models.Exists(unresolved))

    def in_class(self, cls: PriorityClass) -> RunQuerySet:
        low, high = cls.bounds
        return self.filter(priority__gte=low, priority__lte=high)


#: Run's manager: RunQuerySet's filters on ``Run.objects``; the proxies' managers extend it.
RunManager = models.Manager.from_queryset(RunQuerySet)


def _run_link(*, related_name: str) -> models.ForeignKey[Run | None, Run | None]:
    """A run's link to another run (its parent, its original, the run it
    interrupted), NULL for none: no foreign key constraint and no index (a
    run moves between partitions and is pruned apart from those it names),
    never edited in the admin."""
    return models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name=related_name,
        db_constraint=False,
        db_index=False,
        editable=False,
    )


def _index_where_set(field: str) -> models.Index:
    """An index of the runs that have ``field`` (not NULL): a run without
    it writes no entry."""
    return models.Index(
        fields=[field],
        condition=Q(**{f"{field}__isnull": False}),
        name=f"runqueue_run_{field}_idx",
    )


class Run(models.Model):
    """One unit of agent work: a turn, a research job, a maintenance job."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.CharField(max_length=TENANT_MAX_LENGTH, default="default")
    #: Runs with the same key share a concurrency cap per class
    #: (``ConcurrencyLimit``, ``RUNQUEUE["CONCURRENCY"]``); submit makes it the
    #: tenant unless told otherwise.
    concurrency_key = models.CharField(max_length=255)
    principal = models.CharField(max_length=255, blank=True, default="")
    # NULL, not "": runs outside a session never collide in the unique index.
    session_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    kind = models.CharField(max_length=KIND_MAX_LENGTH)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus, default=RunStatus.QUEUED)
    priority = models.SmallIntegerField(default=PriorityClass.INTERACTIVE)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=3)
    scheduled_for = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    #: A random token each claim writes and every fenced write matches, with
    #: the epoch: a claim a failover lost cannot be made again with the same
    #: token, as it can with the same epoch. NULL when no lease is held, but
    #: a succeeded run keeps its last lease's token and owner: its
    #: ``run.claimed`` event is read from the row (``claim_event_id``).
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    #: The id of the current attempt's ``run.claimed`` event, taken from the
    #: events' sequence by the claim, and when the claim was made: the event
    #: is read from the row (``EventLog``) while the run runs and after it
    #: succeeds, and written as an event row when the attempt ends any other
    #: way (migration 0024; docs/decisions/queue.md, "Claim and success on the
    #: run's row"). NULL: no such claim on the row.
    claim_event_id = models.BigIntegerField(null=True, blank=True, editable=False)
    claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: How long the claimed run had waited since it became due, in ms (the
    #: claim's ``wait_ms``), as the claim measured it.
    claim_wait_ms = models.IntegerField(null=True, blank=True, editable=False)
    #: The id of the run's ``run.succeeded`` event, read from the row as the
    #: claim's is; NULL unless the run succeeded.
    success_event_id = models.BigIntegerField(null=True, blank=True, editable=False)
    #: The id of the run's ``run.created`` event when the row holds it (the
    #: event says only the run's priority, which never changes); NULL when
    #: it is an event row (a start deadline, a budget, a place in line or an
    #: interrupted run recorded in it).
    created_event_id = models.BigIntegerField(null=True, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    input = models.JSONField(null=True, blank=True)
    #: How the queue routed this turn (``runqueue.leases.turns``): the messages
    #: joined into it, whether it is a steer. NULL for a run of one message.
    turn = models.JSONField(null=True, blank=True)
    failure = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: The W3C traceparent of the request or span that submitted the run
    #: ("" without one): the worker's span links to it (runqueue.observability.tracing).
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")
    #: The budget (``Budget.key``) of the run's next model call and the
    #: tokens it declares: the claim takes the run only once one request and
    #: these tokens are reserved on it (docs/decisions/queue.md, "Budgets"). NULL:
    #: no budget, the plain claim takes it.
    budget_key = models.CharField(  # noqa: DJ001 - NULL: no budget, never ""
        max_length=BUDGET_KEY_MAX_LENGTH, null=True, blank=True
    )
    budget_tokens = models.IntegerField(null=True, blank=True)
    #: Tokens reserved (claims and ``ctx.reserve``) and used (``ctx.settle``)
    #: over the run's life.
    budget_reserved = models.BigIntegerField(default=0, db_default=0)
    budget_used = models.BigIntegerField(default=0, db_default=0)
    #: The run that spawned this one (``ctx.spawn``); NULL for a submitted run.
    parent = _run_link(related_name="children")
    #: Its children not terminal yet: each child's terminal transition counts
    #: down here, under this row's lock (runqueue_join, fn_tree.sql).
    children_open = models.IntegerField(default=0, db_default=0, editable=False)
    #: While waiting or waiting_for_user: what for (WaitReason), the signal's
    #: name, since when and until when (the deadline; NULL for none).
    wait_reason = models.CharField(
        max_length=16, choices=WaitReason, blank=True, default="", db_default=""
    )
    wait_name = models.CharField(max_length=255, blank=True, default="", db_default="")
    #: While waiting for an inbound event: the JSON object its data must
    #: contain (``ctx.wait_for_event(match=)``); NULL for any other wait.
    wait_match = models.JSONField(null=True, blank=True, editable=False)
    waiting_since = models.DateTimeField(null=True, blank=True)
    wait_until = models.DateTimeField(null=True, blank=True)
    #: The last wait ended at its deadline (``ctx.timed_out``).
    timed_out = models.BooleanField(default=False, db_default=False)
    #: Until when the run may first be claimed (``start_within``); past it
    #: the deadline service cancels it as expired. The first claim clears
    #: it: the deadline is for the first start (docs/decisions/sessions.md, "Run
    #: deadlines"). NULL: no start deadline.
    start_by = models.DateTimeField(null=True, blank=True, editable=False)
    #: The longest an attempt may run, in seconds (``max_duration``); past
    #: it the worker cancels the handler and the run fails with reason
    #: max_duration. NULL: no limit.
    max_duration = models.FloatField(null=True, blank=True, editable=False)
    #: The finished run this one was forked from (``runqueue.fork``): it
    #: replays that run's first steps from copied records; NULL for any
    #: other run. The original lists its forks (``Run.forks``).
    forked_from = _run_link(related_name="forks")
    #: A pending turn's place in its session's line: the first (lowest) is
    #: queued when the active run ends. Kept after it is promoted; NULL for
    #: a run that never waited in line.
    place = models.BigIntegerField(null=True, blank=True, editable=False)
    #: The run this one interrupted (``on_busy="interrupt"``): its handler
    #: reads what that run did as ``ctx.interrupted``. NULL otherwise.
    interrupted = _run_link(related_name="interrupted_by")
    #: The version of its kind's handler the run is pinned to: set by its
    #: first claim (the claiming worker's newest version of the kind), and
    #: only a worker with that version claims it again, unless a newer
    #: version takes it over between turns (``migrate_from``;
    #: docs/decisions/run-trees.md, "Versions and rolling deploys"). NULL: never
    #: claimed (a fork that copies steps starts pinned to its original's).
    handler_version = models.IntegerField(null=True, blank=True, editable=False)
    #: Paused by ``runqueue.pause_run`` (None: not paused): the claim steps
    #: over it and its start deadline is frozen until ``resume_run``.
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = RunManager()

    class Meta:
        db_table = "runqueue_run"
        ordering = ["-created_at"]
        constraints = [
            # ADR-0004 §10: one non-terminal run per session, in the schema.
            # waiting_for_user holds the slot; input delivery resumes that run.
            # Runs without a session have no entry (migration 0016).
            models.UniqueConstraint(
                fields=["tenant", "session_id"],
                condition=Q(session_id__isnull=False, status__in=ACTIVE_STATUSES),
                name="runqueue_run_one_active_per_session",
            ),
            # A session's line of pending turns (on_busy "enqueue"): one
            # place each; the promotion reads the first here (live partition).
            models.UniqueConstraint(
                fields=["tenant", "session_id", "place"],
                condition=Q(status=RunStatus.PENDING),
                name="runqueue_run_pending_place",
            ),
            models.CheckConstraint(
                condition=~Q(status=RunStatus.PENDING)
                | Q(place__isnull=False, session_id__isnull=False),
                name="runqueue_run_pending_in_line",
            ),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="runqueue_run_status_valid"
            ),
            # A claim's event is held on the row only while running, succeeded
            # or failed, a success's only while succeeded: a statement that
            # moves a run on writes its claim as an event row and clears it
            # (migration 0037).
            models.CheckConstraint(
                condition=Q(claim_event_id__isnull=True)
                | Q(status__in=[RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED]),
                name="runqueue_run_claim_held",
            ),
            models.CheckConstraint(
                condition=Q(success_event_id__isnull=True) | Q(status=RunStatus.SUCCEEDED),
                name="runqueue_run_success_held",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0), name="runqueue_run_priority_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(attempts__gte=0, attempts__lte=models.F("max_attempts")),
                name="runqueue_run_attempts_in_range",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="runqueue_run_max_attempts_gte_1"
            ),
            models.CheckConstraint(
                condition=Q(lease_epoch__gte=0), name="runqueue_run_epoch_gte_0"
            ),
            models.CheckConstraint(
                condition=~Q(status=RunStatus.RUNNING) | Q(lease_expires_at__isnull=False),
                name="runqueue_run_running_has_lease",
            ),
            models.CheckConstraint(
                condition=Q(status__in=LIVE_STATUSES) | Q(finished_at__isnull=False),
                name="runqueue_run_terminal_has_finished_at",
            ),
            models.CheckConstraint(condition=~Q(kind=""), name="runqueue_run_kind_not_empty"),
            models.CheckConstraint(
                condition=Q(budget_key__isnull=True)
                | Q(budget_tokens__isnull=False, budget_tokens__gte=0),
                name="runqueue_run_budget_declared",
            ),
            models.CheckConstraint(
                condition=Q(children_open__gte=0), name="runqueue_run_children_open_gte_0"
            ),
        ]
        indexes = [
            # The claim's index: queued runs only, in claim order. A claimed
            # run leaves it, so it stays as small as the backlog and a claim
            # adds no entry to it. lease_expires_at stays out of every index
            # so heartbeats remain HOT updates.
            models.Index(
                fields=["priority", "created_at"],
                condition=Q(status=RunStatus.QUEUED),
                name="runqueue_run_claim_idx",
            ),
            # Runs that hold or wait for a lease, in claim order: the sweeper
            # (status) finds them here, never through the claim index,
            # whatever the statistics say; the dashboard reads the last
            # hour's claims and the longest held slots as a range of it. The
            # owner's IS NOT NULL (always true; migration 0038) keeps the
            # predicate from being implied by a finish's or fence's "status =
            # 'running'": with statistics taken while runs were queued, the
            # planner walked every running run here for each finish instead
            # of going by id. The reads of this range say "lease_owner >= ''"
            # (always true), which implies it: an IS NOT NULL of their own
            # would not do, as PostgreSQL 17 drops one on a NOT NULL column.
            models.Index(
                fields=["status", "claimed_at", "id"],
                condition=Q(
                    status__in=[RunStatus.RUNNING, RunStatus.WAITING_FOR_USER],
                    lease_owner__isnull=False,
                ),
                name="runqueue_run_leased_idx",
            ),
            # The capped claim's index: per key and status, in claim order. It
            # counts a (key, class)'s running runs, and finds each key's next
            # queued runs, so a claim steps over a key's long backlog at its
            # cap in one probe instead of walking it. Queued and running runs
            # only; a heartbeat changes none of its columns (still HOT). The
            # key's IS NOT NULL (always true) keeps the predicate from being
            # implied by a fence's "status = 'running'": with statistics taken
            # while runs were queued, the planner would otherwise send fences
            # through this index.
            models.Index(
                fields=["concurrency_key", "status", "priority", "created_at"],
                condition=Q(
                    status__in=[RunStatus.QUEUED, RunStatus.RUNNING], concurrency_key__isnull=False
                ),
                name="runqueue_run_key_idx",
            ),
            # Queued runs with a budget, per budget and tenant: whether a
            # tenant still waits on a budget (its fair share,
            # runqueue_budget_take) and the dashboard's runs waiting on one.
            models.Index(
                fields=["budget_key", "tenant"],
                condition=Q(status=RunStatus.QUEUED, budget_key__isnull=False),
                name="runqueue_run_budget_idx",
            ),
            # The console's tenant filter, newest first, and the tenants'
            # skip scan, on every partition (0036). The search by session id:
            # runs with a session only, so a run without one writes no entry
            # at its submit, claim or finish (migration 0016). The search by
            # principal, on every partition: runs with one only (0022); the
            # kind and class filters over history, on the finished days only
            # (0009).
            models.Index(fields=["tenant", "created_at"], name="runqueue_run_tenant_idx"),
            _index_where_set("session_id"),
            # A session's turns newest first, a page at a time (the session
            # read, its stream's runs): runs with a session only, on every
            # partition (migration 0030). created_at never changes, so it
            # costs a heartbeat nothing.
            models.Index(
                fields=["tenant", "session_id", "created_at", "id"],
                condition=Q(session_id__isnull=False),
                name="runqueue_run_session_turns_idx",
            ),
            models.Index(
                fields=["principal"],
                condition=~Q(principal=""),
                name="runqueue_run_principal_idx",
            ),
            models.Index(fields=["kind", "created_at"], name="runqueue_run_kind_idx"),
            models.Index(fields=["priority", "created_at"], name="runqueue_run_priority_idx"),
            # Finished runs by time (the dashboard's throughput). A BRIN in the
            # database, as a finished day is written in finished_at order
            # (migration 0016; declared plain here, as Django's BrinIndex
            # would ask every project for django.contrib.postgres).
            models.Index(fields=["finished_at"], name="runqueue_run_finished_idx"),
            # The admin: run lists are newest first (created_at, then id), and
            # the dead letter is listed and counted by when it failed.
            # created_at never changes, so heartbeats stay HOT.
            models.Index(fields=["created_at", "id"], name="runqueue_run_created_idx"),
            models.Index(
                fields=["finished_at"],
                condition=Q(status=RunStatus.FAILED),
                name="runqueue_run_failed_idx",
            ),
            # A run's children, on every partition (the admin's tree, the
            # cascade of a cancel, ctx.children()).
            _index_where_set("parent"),
            # Waiting runs by deadline: the worker's deadline service reads
            # the next due ones here (live partition only).
            models.Index(
                fields=["wait_until"],
                condition=Q(status__in=WAIT_STATUSES, wait_until__isnull=False),
                name="runqueue_run_deadline_idx",
            ),
            # Queued and pending runs by start deadline: the deadline
            # service expires the due ones through it (live partition only).
            models.Index(
                fields=["start_by"],
                condition=Q(status__in=START_BY_STATUSES, start_by__isnull=False),
                name="runqueue_run_start_by_idx",
            ),
            # A run's forks, on every partition (the run page, the API).
            _index_where_set("forked_from"),
            # Runs waiting for an inbound event, by tenant and name: an
            # event's insert finds the waits it ends here (live partition).
            models.Index(
                fields=["tenant", "wait_name"],
                condition=Q(status=RunStatus.WAITING, wait_reason=WaitReason.EVENT),
                name="runqueue_run_event_wait_idx",
            ),
            # Waiting runs by reason: the dashboard's and /metrics' counts.
            models.Index(
                fields=["wait_reason", "id"],
                condition=Q(status__in=WAIT_STATUSES),
                name="runqueue_run_waiting_idx",
            ),
        ]
        permissions = [
            ("requeue_run", "Can requeue a dead-lettered run"),
            ("cancel_run", "Can cancel a run"),
            ("resolve_uncertain", "Can resolve an uncertain tool invocation"),
            ("fork_run", "Can fork a finished run from one of its steps"),
            ("decide_tool", "Can approve, reject, edit or answer a tool call awaiting approval"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"

    @property
    def priority_class(self) -> PriorityClass:
        return PriorityClass.of(self.priority)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class RunViewManager(RunManager):
    """A proxy model's manager: the runs one named RunQuerySet filter selects."""

    def __init__(self, view: str) -> None:
        super().__init__()
        self.view = view

    def get_queryset(self) -> RunQuerySet:
        return getattr(RunQuerySet(self.model, using=self._db), self.view)()


class DeadLetteredRun(Run):
    """Failed runs: the dead letter, with its own admin changelist."""

    objects: ClassVar[RunViewManager] = RunViewManager("dead_lettered")

    class Meta:
        proxy = True
        verbose_name = "dead-lettered run"
        verbose_name_plural = "dead-lettered runs"


class UncertainRun(Run):
    """Runs with a tool invocation that may or may not have happened, unresolved."""

    objects: ClassVar[RunViewManager] = RunViewManager("uncertain")

    class Meta:
        proxy = True
        verbose_name = "uncertain run"
        verbose_name_plural = "uncertain runs"
