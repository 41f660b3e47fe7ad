"""What a run records beside its row: its key, events, signals, stream
watchers, tool invocations and checkpoints."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from runqueue.limits import TENANT_MAX_LENGTH
from runqueue.models.choices import Idempotency, SubmitOutcome, ToolStatus
from runqueue.models.run_keys import run_key


class IdempotencyKey(models.Model):
    """A client's Idempotency-Key and what its first request did."""

    tenant = models.CharField(max_length=TENANT_MAX_LENGTH)
    principal = models.CharField(max_length=255, blank=True, default="")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    run = run_key("idempotency_keys")
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


class _LogEntry(models.Model):
    """The columns of an entry of a run's log, as ``RunEvent`` writes it and
    ``EventLog`` reads it."""

    type = models.CharField(max_length=64)
    lease_epoch = models.BigIntegerField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        abstract = True
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.type} @{self.lease_epoch}"


class RunEvent(_LogEntry):
    """Append-only log of a run's events, but for those its row holds (a
    plain creation, the running or last claim, the success: migration
    0024): read through ``EventLog``, which shows them all, so the log
    alone rebuilds a run's history."""

    # db_index=False: the primary key in the database is (run, id,
    # created_at) (migration 0023), so it serves every read by run; Django
    # knows id as the key, which the sequence keeps unique.
    run = run_key("events", db_index=False)
    created_at = models.DateTimeField(db_default=Now())

    class Meta(_LogEntry.Meta):
        db_table = "runqueue_run_event"
        indexes = [
            # Events by time (the dashboard's last minutes of claims). A BRIN
            # in the database, as events are written in created_at order
            # (migration 0016; declared plain here, as for finished_at).
            models.Index(fields=["created_at"], name="runqueue_event_created_idx"),
        ]


class EventLog(_LogEntry):
    """A run's whole log, to read: its event rows, and the events its row
    holds instead (a view, ``runqueue_event_log``, migration 0024).

    A claim does not write a ``run.claimed`` row, nor a success a
    ``run.succeeded`` row: the run's row has their ids (from the events'
    sequence), the claim's time, owner, token and attempt, and the finish's
    time, so the view builds both from it while the run runs and after it
    succeeds. A submit whose ``run.created`` says only the priority holds it
    on the row the same way (``created_event_id``). An attempt that ends
    any other way writes its claim as an event row, in the statement that
    ends it (the SQL fragment ``claims_ended``), but a handler's failure,
    which keeps it on the row as a success does; a row holds a claim only
    while running, succeeded or failed (``runqueue_run_claim_held``). Every
    reader of events reads here; writers append to ``RunEvent``.
    """

    run = run_key("log", on_delete=models.DO_NOTHING, db_index=False)
    created_at = models.DateTimeField()

    class Meta(_LogEntry.Meta):
        managed = False
        db_table = "runqueue_event_log"


class Signal(models.Model):
    """A signal sent to a run that was not waiting for it yet: the run's
    mailbox. The wait that names it takes it (and deletes it) in its own
    transition, under the run's row lock, so a signal sent before the wait
    begins is delivered once, never lost and never twice."""

    run = run_key("signals", db_index=False)
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

    run = run_key("tool_invocations")
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
    #: A call made with ``approval``: what it asked (``timeout``,
    #: ``on_timeout``) and, once decided, the decision: ``decision``,
    #: ``actor``, ``at``, and ``reason``, ``arguments`` or ``result`` as it
    #: says (``runqueue.decide_tool``). Null for a call that needed none.
    approval = models.JSONField(null=True, blank=True)
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
            # The console's pending approvals, few at any time.
            models.Index(
                fields=["created_at"],
                condition=Q(status=ToolStatus.AWAITING_APPROVAL),
                name="runqueue_tool_awaiting_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} #{self.seq} ({self.status})"


class Checkpoint(models.Model):
    """A handler's saved state at a tool-invocation boundary."""

    run = run_key("checkpoints")
    seq = models.IntegerField()
    state = models.JSONField()
    #: How many tool invocations the handler had made when it saved this
    #: state: on resume, numbering continues from here.
    tool_seq = models.IntegerField(default=0)
    #: Saved by the end of a turn (``ask_user``, a wait for children, a
    #: signal or a time), not by ``ctx.checkpoint`` or a budget wait inside
    #: one: a newer handler version may take a run over only from a turn's
    #: end (docs/decisions/run-trees.md, "Versions and rolling deploys").
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
