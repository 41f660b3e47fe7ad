"""The run queue's tables.

Every column, index and constraint of the queue is declared here, so the
migrations' state is the database's. Beneath ``Run`` the runs table is
partitioned (migration 0009, ``runqueue.partitions``): live runs in
``runqueue_run_live``, which alone carries the claim, lease, key and
one-active-run-per-session indexes declared below, and finished runs in a
partition per day of ``finished_at``; events are partitioned by day too.
The ORM sees one table: ``Run.objects`` finds a run live or finished.
Foreign keys to ``Run`` have no database constraint (PostgreSQL cannot
reference a partitioned table's id alone): deletes cascade in the ORM, and
retention drops a finished day with everything of its runs.

Run state is written by ``runqueue.submission`` (new runs, input delivered)
and ``runqueue.leases`` (every other transition) only; ``runqueue.partitions``
drops finished days past the retention.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runqueue.limits import (
    BUDGET_KEY_MAX_LENGTH,
    COST_DIGITS,
    COST_PLACES,
    KIND_MAX_LENGTH,
    TENANT_MAX_LENGTH,
    USAGE_MODEL_MAX_LENGTH,
)


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    WAITING_FOR_USER = "waiting_for_user", "Waiting for user"
    #: Ended its turn waiting for its children, a signal or a time
    #: (``Run.wait_reason``); holds no lease and no slot.
    WAITING = "waiting", "Waiting"
    #: A turn submitted with ``on_busy="enqueue"`` (or ``"merge"``) while its
    #: session had an active run: it waits in line (``Run.place``) and the
    #: statement that ends the session's active run queues the first one
    #: (docs/decisions.md, "Busy sessions: on_busy"). Not active: it holds no
    #: session slot, no lease, and no claim takes it.
    PENDING = "pending", "Pending (behind its session's active run)"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed (dead-lettered)"
    CANCELLED = "cancelled", "Cancelled"


#: Statuses that hold a session's one active-run slot.
ACTIVE_STATUSES: tuple[str, ...] = (
    RunStatus.QUEUED,
    RunStatus.RUNNING,
    RunStatus.WAITING_FOR_USER,
    RunStatus.WAITING,
)
#: Statuses of a run that is not terminal: the active ones and pending
#: turns. Every one of them is in the live partition.
LIVE_STATUSES: tuple[str, ...] = (*ACTIVE_STATUSES, RunStatus.PENDING)
#: Statuses of a run that waits (no lease, no slot) for a reason of
#: ``WaitReason``: its children, a signal, a time, or the user.
WAIT_STATUSES: tuple[str, ...] = (RunStatus.WAITING, RunStatus.WAITING_FOR_USER)
#: Statuses a start deadline (``start_within``) expires: a run not claimed
#: yet, queued or waiting in its session's line.
START_BY_STATUSES: tuple[str, ...] = (RunStatus.QUEUED, RunStatus.PENDING)
TERMINAL_STATUSES: tuple[str, ...] = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
)


#: The highest priority a run can have: the column is a PostgreSQL smallint.
PRIORITY_MAX = 32767


class PriorityClass(models.IntegerChoices):
    """Claim classes. A class is a range, so it can subdivide without a migration.

    The one home of class arithmetic: a class's value is the lowest priority
    in it (stored as is in ``ConcurrencyLimit``, ``PausedKind``, tokens), its
    ``index`` is its place in class order (0, 1, 2: how the claim statement
    and the metrics count classes), its ``slug`` is the name settings, the
    API, the CLI and metric labels use, and ``sql_index`` is the same
    arithmetic as SQL for statements that classify rows.
    """

    INTERACTIVE = 0, "Interactive"
    ASYNC = 10, "Async"
    MAINTENANCE = 20, "Maintenance"

    @classmethod
    def of(cls, priority: int) -> PriorityClass:
        """The class a priority value falls in (``describe()`` lists the ranges)."""
        if not 0 <= priority <= PRIORITY_MAX:
            raise ValueError(f"priority must be between 0 and {PRIORITY_MAX}, got {priority}")
        return cls.by_index(min(priority // _CLASS_WIDTH, len(cls) - 1))

    @classmethod
    def by_index(cls, index: int) -> PriorityClass:
        """The class at ``index`` in class order."""
        return list(cls)[index]

    @classmethod
    def from_slug(cls, slug: str) -> PriorityClass:
        """The class named ``slug`` ("interactive", "async", "maintenance")."""
        for member in cls:
            if member.slug == slug:
                return member
        names = ", ".join(cls.slugs())
        raise ValueError(f"unknown priority class {slug!r}; the classes are {names}")

    @classmethod
    def slugs(cls) -> tuple[str, ...]:
        return tuple(member.slug for member in cls)

    @classmethod
    def sql_index(cls, column: str) -> str:
        """SQL for the class index of a priority column (a smallint expression)."""
        return f"least({column} / {_CLASS_WIDTH}, {len(cls) - 1})"

    @classmethod
    def orm_index(cls, priority: str | models.Expression) -> models.Func:
        """The class index of a priority field or expression, for annotations:
        ``sql_index``'s SQL, so a query grouping by class reads the same rule."""
        expression = models.F(priority) if isinstance(priority, str) else priority
        return models.Func(
            expression,
            template=cls.sql_index("(%(expressions)s)"),
            output_field=models.IntegerField(),
        )

    @property
    def slug(self) -> str:
        return self.name.lower()

    @property
    def index(self) -> int:
        return int(self) // _CLASS_WIDTH

    @property
    def bounds(self) -> tuple[int, int]:
        """Inclusive (low, high) priority values of this class."""
        last = self.index == len(type(self)) - 1
        return int(self), PRIORITY_MAX if last else int(self) + _CLASS_WIDTH - 1

    @classmethod
    def describe(cls) -> str:
        """The classes' ranges for help texts: "0-9 interactive, 10-19 async, ..."."""
        return ", ".join(f"{c.bounds[0]}-{c.bounds[1]} {c.slug}" for c in cls)


#: Each class but the last spans this many priority values.
_CLASS_WIDTH = 10


class WaitReason(models.TextChoices):
    """What a waiting run waits for (``Run.wait_reason``)."""

    CHILDREN = "children", "Its children"
    SIGNAL = "signal", "A signal"
    TIMER = "timer", "A time"
    USER = "user", "The user"


class Idempotency(models.TextChoices):
    """A tool's declared idempotency class: decides recovery of a started call."""

    IDEMPOTENT = "idempotent", "Idempotent"
    NON_IDEMPOTENT = "non_idempotent", "Non-idempotent"


class ToolStatus(models.TextChoices):
    STARTED = "started", "Started"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    UNCERTAIN = "uncertain", "Uncertain"


class SubmitOutcome(models.TextChoices):
    CREATED = "created", "Run created"
    INPUT_DELIVERED = "input_delivered", "Input delivered"
    #: ``on_busy`` outcomes (docs/decisions.md, "Busy sessions: on_busy").
    ENQUEUED = "enqueued", "Run created, pending behind the session's active run"
    MERGED = "merged", "Payload merged into a turn not started yet"
    INTERRUPTED = "interrupted", "Run created, the session's active run interrupted"
    ROLLED_BACK = "rolled_back", "Run created, the session's active run rolled back"


class RunQuerySet(models.QuerySet):
    """Read-only named filters; writes go through submit and leases."""

    def active(self) -> RunQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def pending(self) -> RunQuerySet:
        """Pending turns, in their sessions' order."""
        return self.filter(status=RunStatus.PENDING).order_by("tenant", "session_id", "place")

    def session_line(self, tenant: str, session_id: str) -> RunQuerySet:
        """A session's live runs in turn order: its active run (if any), then
        its pending turns by place (docs/decisions.md, "Busy sessions")."""
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
        unresolved = ToolInvocation.objects.filter(
            run=models.OuterRef("pk"), status=ToolStatus.UNCERTAIN, resolution__isnull=True
        )
        return self.filter(models.Exists(unresolved))

    def in_class(self, cls: PriorityClass) -> RunQuerySet:
        low, high = cls.bounds
        return self.filter(priority__gte=low, priority__lte=high)


#: Run's manager: RunQuerySet's filters on ``Run.objects``; the proxies' managers extend it.
RunManager = models.Manager.from_queryset(RunQuerySet)


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
    #: token, as it can with the same epoch. NULL when no lease is held.
    lease_token = models.UUIDField(null=True, blank=True, editable=False)
    lease_owner = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    input = models.JSONField(null=True, blank=True)
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
    #: these tokens are reserved on it (docs/decisions.md, "Budgets"). NULL:
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
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="children",
        db_constraint=False,
        db_index=False,
        editable=False,
    )
    #: Its children not terminal yet: each child's terminal transition counts
    #: down here, under this row's lock (runqueue_join, functions.sql).
    children_open = models.IntegerField(default=0, db_default=0, editable=False)
    #: While waiting or waiting_for_user: what for (WaitReason), the signal's
    #: name, since when and until when (the deadline; NULL for none).
    wait_reason = models.CharField(
        max_length=16, choices=WaitReason, blank=True, default="", db_default=""
    )
    wait_name = models.CharField(max_length=255, blank=True, default="", db_default="")
    waiting_since = models.DateTimeField(null=True, blank=True)
    wait_until = models.DateTimeField(null=True, blank=True)
    #: The last wait ended at its deadline (``ctx.timed_out``).
    timed_out = models.BooleanField(default=False, db_default=False)
    #: Until when the run may first be claimed (``start_within``); past it
    #: the deadline service cancels it as expired. The first claim clears
    #: it: the deadline is for the first start (docs/decisions.md, "Run
    #: deadlines"). NULL: no start deadline.
    start_by = models.DateTimeField(null=True, blank=True, editable=False)
    #: The longest an attempt may run, in seconds (``max_duration``); past
    #: it the worker cancels the handler and the run fails with reason
    #: max_duration. NULL: no limit.
    max_duration = models.FloatField(null=True, blank=True, editable=False)
    #: The finished run this one was forked from (``runqueue.fork``): it
    #: replays that run's first steps from copied records; NULL for any
    #: other run. The original lists its forks (``Run.forks``).
    forked_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="forks",
        db_constraint=False,
        db_index=False,
        editable=False,
    )
    #: A pending turn's place in its session's line: the first (lowest) is
    #: queued when the active run ends. Kept after it is promoted; NULL for
    #: a run that never waited in line.
    place = models.BigIntegerField(null=True, blank=True, editable=False)
    #: The run this one interrupted (``on_busy="interrupt"``): its handler
    #: reads what that run did as ``ctx.interrupted``. NULL otherwise.
    interrupted = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="interrupted_by",
        db_constraint=False,
        db_index=False,
        editable=False,
    )
    #: The version of its kind's handler the run is pinned to: set by its
    #: first claim (the claiming worker's newest version of the kind), and
    #: only a worker with that version claims it again, unless a newer
    #: version takes it over between turns (``migrate_from``;
    #: docs/decisions.md, "Versions and rolling deploys"). NULL: never
    #: claimed (a fork that copies steps starts pinned to its original's).
    handler_version = models.IntegerField(null=True, blank=True, editable=False)

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
            # Runs that hold or wait for a lease, by id: the fences
            # (id + status) and the sweeper (status) find them here, never
            # through the claim index, whatever the statistics say.
            models.Index(
                fields=["status", "id"],
                condition=Q(status__in=[RunStatus.RUNNING, RunStatus.WAITING_FOR_USER]),
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
            # A session's runs and the console's tenant filter, on every
            # partition. Its search by session id: runs with a session only,
            # so a run without one writes no entry at its submit, claim or
            # finish (migration 0016). The search by principal alone, on every
            # partition; the kind and class filters over history, on the
            # finished days only (0009).
            models.Index(fields=["tenant", "session_id"], name="runqueue_run_session_idx"),
            models.Index(
                fields=["session_id"],
                condition=Q(session_id__isnull=False),
                name="runqueue_run_session_id_idx",
            ),
            models.Index(fields=["principal"], name="runqueue_run_principal_idx"),
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
            models.Index(
                fields=["parent"],
                condition=Q(parent__isnull=False),
                name="runqueue_run_parent_idx",
            ),
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
            models.Index(
                fields=["forked_from"],
                condition=Q(forked_from__isnull=False),
                name="runqueue_run_forked_from_idx",
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


class IdempotencyKey(models.Model):
    """A client's Idempotency-Key and what its first request did."""

    tenant = models.CharField(max_length=TENANT_MAX_LENGTH)
    principal = models.CharField(max_length=255, blank=True, default="")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="idempotency_keys", db_constraint=False
    )
    outcome = models.CharField(max_length=20, choices=SubmitOutcome)
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "runqueue_idempotency_key"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal", "key"], name="runqueue_idempotency_key_unique"
            ),
            models.CheckConstraint(
                condition=~Q(key=""), name="runqueue_idempotency_key_not_empty"
            ),
        ]
        indexes = [models.Index(fields=["expires_at"], name="runqueue_idemkey_expires_idx")]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.principal}/{self.key}"


class RunEvent(models.Model):
    """Append-only log: the events alone rebuild a run's history."""

    # db_index=False: runqueue_event_run_idx (run, id) serves every read by run.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="events", db_constraint=False, db_index=False
    )
    type = models.CharField(max_length=64)
    lease_epoch = models.BigIntegerField()
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_run_event"
        ordering = ["id"]
        indexes = [
            models.Index(fields=["run", "id"], name="runqueue_event_run_idx"),
            # Events by time (the dashboard's last minutes of claims). A BRIN
            # in the database, as events are written in created_at order
            # (migration 0016; declared plain here, as for finished_at).
            models.Index(fields=["created_at"], name="runqueue_event_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.type} @{self.lease_epoch}"


class Signal(models.Model):
    """A signal sent to a run that was not waiting for it yet: the run's
    mailbox. The wait that names it takes it (and deletes it) in its own
    transition, under the run's row lock, so a signal sent before the wait
    begins is delivered once, never lost and never twice."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="signals", db_constraint=False, db_index=False
    )
    name = models.CharField(max_length=255)
    data = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_signal"
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "name", "id"], name="runqueue_signal_run_idx")]

    def __str__(self) -> str:
        return f"{self.name} for {self.run_id}"


class StreamWatch(models.Model):
    """A web process streaming a run's events (``runqueue.stream``).

    The trigger on ``runqueue_run_event`` sends a NOTIFY only for runs with
    a row here, so appending events to runs nobody watches costs one index
    probe and never a NOTIFY (whose commit lock would serialise workers).
    Unlogged; rows of a process that died expire (``expires_at``).
    """

    pk = models.CompositePrimaryKey("run_id", "watcher")
    run_id = models.UUIDField()
    watcher = models.CharField(max_length=255)
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "runqueue_stream_watch"

    def __str__(self) -> str:
        return f"{self.watcher} watches {self.run_id}"


class ToolInvocation(models.Model):
    """One side effect of a run, recorded started before it runs."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="tool_invocations", db_constraint=False
    )
    seq = models.IntegerField()
    tool = models.CharField(max_length=255)
    idempotency = models.CharField(max_length=20, choices=Idempotency)
    status = models.CharField(max_length=20, choices=ToolStatus, default=ToolStatus.STARTED)
    arguments = models.JSONField(default=dict, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    lease_epoch = models.BigIntegerField()
    #: The token of the lease that last wrote it (Run.lease_token): two
    #: owners of one epoch, after a failover, are told apart by it.
    lease_token = models.UUIDField(null=True, blank=True)
    resolution = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runqueue_tool_invocation"
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="runqueue_tool_run_seq_unique"),
            models.CheckConstraint(condition=Q(seq__gte=0), name="runqueue_tool_seq_gte_0"),
        ]
        indexes = [
            models.Index(
                fields=["run"],
                condition=Q(status=ToolStatus.UNCERTAIN, resolution__isnull=True),
                name="runqueue_tool_unresolved_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} #{self.seq} ({self.status})"


class Checkpoint(models.Model):
    """A handler's saved state at a tool-invocation boundary."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="checkpoints", db_constraint=False
    )
    seq = models.IntegerField()
    state = models.JSONField()
    #: How many tool invocations the handler had made when it saved this
    #: state: on resume, numbering continues from here.
    tool_seq = models.IntegerField(default=0)
    #: Saved by the end of a turn (``ask_user``, a wait for children, a
    #: signal or a time), not by ``ctx.checkpoint`` or a budget wait inside
    #: one: a newer handler version may take a run over only from a turn's
    #: end (docs/decisions.md, "Versions and rolling deploys").
    turn_end = models.BooleanField(default=False, db_default=False)
    lease_epoch = models.BigIntegerField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runqueue_checkpoint"
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "seq"], name="runqueue_checkpoint_run_seq_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"checkpoint #{self.seq} of {self.run_id}"


class Usage(models.Model):
    """One model call's tokens and cost, as a handler recorded it
    (``ctx.record_usage``): kept per run, with the run's tree root, tenant
    and the root's session copied in, so a tree, a session and a tenant sum
    through an index. Written without the lease's fence (the money was
    spent), once per (run, lease epoch, call): a write retried, or made
    again by a fenced worker's same call, counts once (docs/decisions.md,
    "Usage and cost")."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="usage", db_constraint=False, db_index=False
    )
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
    (docs/decisions.md, "Usage and cost")."""

    run = models.OneToOneField(
        Run,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="tree_spend",
        db_constraint=False,
    )
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
    """A model provider's rate limit on one key (docs/decisions.md,
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


# --- scheduled work: schedules, paused kinds, queue events (issue 14) --------


class CatchUp(models.TextChoices):
    """What a schedule does with ticks missed while no worker ran."""

    LATEST = "latest", "Latest missed tick only"
    ALL = "all", "Every missed tick (capped)"
    NONE = "none", "No missed tick"


class ScheduleSource(models.TextChoices):
    SETTINGS = "settings", "RUNQUEUE['SCHEDULES']"
    ADMIN = "admin", "Admin"


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


class ScheduleQuerySet(models.QuerySet):
    def active(self) -> ScheduleQuerySet:
        return self.filter(paused_at__isnull=True, retired_at__isnull=True)

    def due(self, now: dt.datetime) -> ScheduleQuerySet:
        return self.active().filter(next_fire_at__lte=now)


class Schedule(models.Model):
    """A recurring run: a cron expression in a time zone, and what to submit.

    ``handled_until`` is the cursor: every tick at or before it was fired or
    skipped. ``next_fire_at`` is the first tick after it, indexed, so each
    worker's periodic look for due schedules is one small index read.
    """

    name = models.CharField(max_length=100, unique=True)
    source = models.CharField(
        max_length=10, choices=ScheduleSource, default=ScheduleSource.ADMIN, editable=False
    )
    cron = models.CharField(
        max_length=255, help_text="Five fields: minute hour day month weekday."
    )
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
