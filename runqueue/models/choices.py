"""Statuses, priority classes and the other choices the tables store."""

from __future__ import annotations

from django.db import models


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
    #: (docs/decisions/sessions.md, "Busy sessions: on_busy"). Not active: it holds no
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
    EVENT = "event", "An inbound event"


#: The reasons a run in status ``waiting`` waits for: every one but the
#: user's (``ask_user`` waits in ``waiting_for_user``).
WAITING_REASONS: tuple[str, ...] = tuple(r for r in WaitReason.values if r != WaitReason.USER)


class Idempotency(models.TextChoices):
    """A tool's declared idempotency class: decides recovery of a started call."""

    IDEMPOTENT = "idempotent", "Idempotent"
    NON_IDEMPOTENT = "non_idempotent", "Non-idempotent"


class ToolStatus(models.TextChoices):
    STARTED = "started", "Started"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    UNCERTAIN = "uncertain", "Uncertain"
    #: Recorded, not run: a person decides first (``invoke_tool(approval=)``).
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    #: Approved (as asked or with edited arguments), not run yet.
    APPROVED = "approved", "Approved"
    #: Rejected: never run; the handler gets the reason.
    REJECTED = "rejected", "Rejected"


class ToolDecision(models.TextChoices):
    """What a person decided for a tool call awaiting approval."""

    APPROVE = "approve", "Approve"
    #: Approve with other arguments.
    EDIT = "edit", "Approve with edited arguments"
    #: Reject, with a reason the handler (and its model) gets.
    REJECT = "reject", "Reject"
    #: Do not run it: this result stands for it.
    RESPOND = "respond", "Respond with a result"


class SubmitOutcome(models.TextChoices):
    CREATED = "created", "Run created"
    INPUT_DELIVERED = "input_delivered", "Input delivered"
    #: ``on_busy`` outcomes (docs/decisions/sessions.md, "Busy sessions: on_busy").
    ENQUEUED = "enqueued", "Run created, pending behind the session's active run"
    MERGED = "merged", "Payload merged into a turn not started yet"
    INTERRUPTED = "interrupted", "Run created, the session's active run interrupted"
    ROLLED_BACK = "rolled_back", "Run created, the session's active run rolled back"
    #: A message for the running turn (``on_busy="steer"``): a pending turn
    #: it may read (``ctx.steers()``), else the session's next turn.
    STEERED = "steered", "Pending turn the running turn may read as a steer"
