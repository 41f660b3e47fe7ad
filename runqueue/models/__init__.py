"""The run queue's tables.

Every column, index and constraint of the queue is declared here, so the
migrations' state is the database's. Beneath ``Run`` the runs table is
partitioned (migration 0009, ``runqueue.history.partitions``): live runs in
``runqueue_run_live``, which alone carries the claim, lease, key and
one-active-run-per-session indexes declared below, and finished runs in a
partition per day of ``finished_at``; events are partitioned by day too.
The ORM sees one table: ``Run.objects`` finds a run live or finished.
Foreign keys to ``Run`` have no database constraint (PostgreSQL cannot
reference a partitioned table's id alone; ``runqueue.models.run_keys``
declares them): deletes cascade in the ORM, and retention drops a finished
day with everything of its runs.

Run state is written by ``runqueue.submission`` (new runs, through
``runqueue.submission.inserts``; input delivered)
and ``runqueue.leases`` (every other transition) only; ``runqueue.history.partitions``
drops finished days past the retention.

A package by concern; every model and name is re-exported here, so
``from runqueue.models import X`` works and Django finds the models.
"""

from runqueue.models.api_tokens import (
    ApiToken,
    ApiTokenQuota,
)
from runqueue.models.capacity import (
    SHARE_MAX,
    SHARE_MIN,
    Budget,
    ConcurrencyLimit,
    shares_problem,
)
from runqueue.models.choices import (
    ACTIVE_STATUSES,
    LIVE_STATUSES,
    PRIORITY_MAX,
    START_BY_STATUSES,
    TERMINAL_STATUSES,
    WAIT_STATUSES,
    WAITING_REASONS,
    Idempotency,
    PriorityClass,
    RunStatus,
    SubmitOutcome,
    ToolDecision,
    ToolStatus,
    WaitReason,
)
from runqueue.models.inbound import (
    EVENT_KEY_MAX_LENGTH,
    EVENT_NAME_MAX_LENGTH,
    EventDelivery,
    EventTrigger,
    InboundEvent,
)
from runqueue.models.records import (
    Checkpoint,
    EventLog,
    IdempotencyKey,
    RunEvent,
    Signal,
    StreamWatch,
    ToolInvocation,
)
from runqueue.models.runs import (
    DeadLetteredRun,
    Run,
    RunManager,
    RunQuerySet,
    RunViewManager,
    UncertainRun,
)
from runqueue.models.schedules import (
    CatchUp,
    Overlap,
    PausedKind,
    QueueEvent,
    Schedule,
    ScheduleQuerySet,
    ScheduleSource,
    ScheduleTick,
    TickOutcome,
)
from runqueue.models.spend import (
    TreeSpend,
    Usage,
)
from runqueue.models.webhooks import (
    WEBHOOK_EVENTS,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookTarget,
)
from runqueue.models.workers import (
    Worker,
)

__all__ = [
    "ACTIVE_STATUSES",
    "ApiToken",
    "ApiTokenQuota",
    "Budget",
    "CatchUp",
    "Checkpoint",
    "ConcurrencyLimit",
    "DeadLetteredRun",
    "EVENT_KEY_MAX_LENGTH",
    "EVENT_NAME_MAX_LENGTH",
    "EventDelivery",
    "EventTrigger",
    "EventLog",
    "Idempotency",
    "IdempotencyKey",
    "InboundEvent",
    "LIVE_STATUSES",
    "Overlap",
    "PRIORITY_MAX",
    "PausedKind",
    "PriorityClass",
    "QueueEvent",
    "Run",
    "RunEvent",
    "RunManager",
    "RunQuerySet",
    "RunStatus",
    "RunViewManager",
    "SHARE_MAX",
    "SHARE_MIN",
    "START_BY_STATUSES",
    "Schedule",
    "ScheduleQuerySet",
    "ScheduleSource",
    "ScheduleTick",
    "Signal",
    "StreamWatch",
    "SubmitOutcome",
    "TERMINAL_STATUSES",
    "TickOutcome",
    "ToolInvocation",
    "ToolDecision",
    "ToolStatus",
    "TreeSpend",
    "UncertainRun",
    "Usage",
    "WAIT_STATUSES",
    "WEBHOOK_EVENTS",
    "WAITING_REASONS",
    "WaitReason",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookTarget",
    "Worker",
    "shares_problem",
]
