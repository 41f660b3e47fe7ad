"""runqueue's exceptions, and the failure taxonomy that classifies the rest."""

from __future__ import annotations

import uuid

from runqueue.limits import MAX_WAIT_SECONDS


class RunqueueError(Exception):
    """Base class of runqueue's errors; raise a subclass."""


class InvalidSubmission(RunqueueError, ValueError):
    """A submit argument is malformed; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class InvalidArgument(RunqueueError, ValueError):
    """An operation's argument (a run id, a reason) is malformed; nothing was written."""

    def __init__(self, operation: str, name: str, message: str) -> None:
        self.operation = operation
        self.name = name
        super().__init__(f"{operation}: {name} {message}")


class SignalTooLarge(InvalidArgument):
    """A signal's data is larger than ``RUNQUEUE["SIGNAL_MAX_BYTES"]``; nothing was written."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__("signal", "data", f"must be at most {limit} bytes as JSON, got {size}")


class MailboxFull(RunqueueError):
    """The run's mailbox already keeps ``RUNQUEUE["SIGNALS_KEPT_MAX"]``
    signals no wait has taken; nothing was written."""

    def __init__(self, run_id: object, limit: int) -> None:
        self.run_id = run_id
        self.limit = limit
        super().__init__(f"run {run_id} already keeps {limit} signals no wait has taken")


class ActiveRunConflict(RunqueueError):
    """The session already has an active run (queued, running or waiting
    for its children, a signal or a time) and the submit's ``on_busy`` is
    ``reject``."""

    def __init__(self, session_id: str, run_id: uuid.UUID | None, status: str | None) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.status = status
        super().__init__(f"session {session_id!r} already has an active run {run_id} ({status})")


class SessionQueueFull(RunqueueError):
    """The session already holds ``RUNQUEUE["SESSION_MAX_PENDING"]``
    pending turns behind its active run; nothing was written."""

    def __init__(self, session_id: str, run_id: uuid.UUID | None, limit: int) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self.limit = limit
        super().__init__(
            f"session {session_id!r} already has {limit} pending turns behind its active run "
            f"{run_id}"
        )


class IdempotencyConflict(RunqueueError):
    """An Idempotency-Key was reused with a different request."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"idempotency key {key!r} was already used for a different request")


class IdempotencyInProgress(RunqueueError):
    """The first request with this key has not finished yet; retry shortly."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"a request with idempotency key {key!r} is still in progress")


class RunNotFound(RunqueueError, LookupError):
    def __init__(self, run_id: object) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id}")


class ToolInvocationNotFound(RunqueueError, LookupError):
    """No tool invocation with this id (an operator resolving a pruned run's, say)."""

    def __init__(self, tool_invocation_id: object) -> None:
        self.tool_invocation_id = tool_invocation_id
        super().__init__(f"no tool invocation {tool_invocation_id}")


class ToolCallNotFound(RunqueueError, LookupError):
    """The run has no tool call with this number."""

    def __init__(self, run_id: object, seq: int) -> None:
        self.run_id = run_id
        self.seq = seq
        super().__init__(f"run {run_id} has no tool call #{seq}")


class NotAwaitingApproval(RunqueueError):
    """The tool call does not wait for a decision: it needed none, or it
    was decided already (``decision`` says how, None if it needed none)."""

    def __init__(self, run_id: object, seq: int, status: str, decision: object) -> None:
        self.run_id = run_id
        self.seq = seq
        self.status = status
        self.decision = decision
        said = f"decided already ({decision})" if decision else status
        super().__init__(f"tool call #{seq} of run {run_id} does not await approval: {said}")


class ApprovalPending(BaseException):  # noqa: N818 - control flow, as asyncio's CancelledError
    """Raised by ``ctx.invoke_tool(..., approval=...)`` when a person must
    decide first: the call is recorded awaiting approval and the runtime
    ends the turn (the run waits, holding no slot), resumed by the
    decision. A BaseException, so the handler's and an agent SDK's
    ``except Exception`` do not take it for the tool's failure; let it
    propagate."""

    def __init__(self, run_id: object, seq: int, tool: str, timeout: float | None) -> None:
        self.run_id = run_id
        self.seq = seq
        self.tool = tool
        self.timeout = timeout
        super().__init__(f"tool call #{seq} ({tool}) of run {run_id} awaits approval")


class RunPaused(BaseException):  # noqa: N818 - control flow, as ApprovalPending
    """Raised by every ``ctx`` call once the run was paused
    (``runqueue.pause_run``): the runtime gives the run back (queued, its
    attempt returned, not claimed until resumed), and the handler replays
    its recorded steps when it runs again. A BaseException for the reason
    ApprovalPending is one; let it propagate."""

    def __init__(self, run_id: object) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} was paused")


class InvalidTransition(RunqueueError):
    """The run is not in a status that allows this operation."""

    def __init__(self, run_id: object, status: str, action: str) -> None:
        self.run_id = run_id
        self.status = status
        self.action = action
        super().__init__(f"cannot {action} run {run_id}: it is {status}")


class UnknownKind(RunqueueError, LookupError):
    """No handler is registered for this kind (or this version of it)."""

    def __init__(self, kind: str, version: int | None = None) -> None:
        self.kind = kind
        self.version = version
        if version is None:
            super().__init__(f"no handler registered for kind {kind!r}")
        else:
            super().__init__(f"no handler registered for kind {kind!r} version {version}")


class PermanentError(RunqueueError):
    """Raised by a handler: fail the run now, never retry."""


class ScheduleRefused(PermanentError):
    """``ctx.schedule`` refused: a run a schedule started may not make
    schedules unless that schedule allows it, and a tenant's handlers own
    at most ``HANDLER_SCHEDULES_PER_TENANT``. Permanent: trying again
    changes neither."""


class TransientError(RunqueueError):
    """Raised by a handler: give the lease up so the run is retried with backoff.

    ``retry_after`` (seconds), if given, is the delay before the next try
    instead of the queue's backoff: a handler that knows better (a
    receiver's ``Retry-After``, its own schedule) says so.
    """

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        if retry_after is not None and not 0 <= retry_after <= MAX_WAIT_SECONDS:
            raise ValueError(f"retry_after must be 0 to {MAX_WAIT_SECONDS:.0f} seconds")
        self.retry_after = retry_after


class ChildrenGone(TransientError, LookupError):
    """``ctx.children()`` found no run for some ids its spawn records name:
    deleted, dropped by a retention older than the rule that keeps a run
    while an ancestor is live, or between a retention's detach of a day and
    its copy of the kept runs (a window of a statement, longer if the
    database failed over in it). Never a shorter list. Transient (see
    ``classify``): the attempt is retried with backoff, so a child that
    comes back is read on the next; one gone for good dead-letters the run
    once its attempts are spent."""

    def __init__(self, run_id: object, missing: list[uuid.UUID], spawned: int) -> None:
        self.run_id = run_id
        self.missing = missing
        self.spawned = spawned
        ids = ", ".join(str(i) for i in missing)
        super().__init__(
            f"run {run_id}: {len(missing)} of its {spawned} children cannot be found ({ids});"
            " deleted, or dropped by the retention"
        )


class ForkRefused(RunqueueError, ValueError):
    """``runqueue.fork`` would copy a step whose outcome nobody knows (an
    ``uncertain`` tool call not resolved, a non-idempotent call left
    ``started``) or a spawn whose child is still live; nothing was written.
    ``step`` is that step's number: a fork from it or before is allowed."""

    def __init__(self, run_id: object, step: int, message: str) -> None:
        self.run_id = run_id
        self.step = step
        super().__init__(f"cannot fork run {run_id} past step #{step}: {message}")


class SpendCapReached(PermanentError):
    """Raised by ``ctx.record_usage`` once the run's tree has recorded its
    ``spend_cap`` or more: the tree's live runs are cancelled (reason
    ``spend_cap``), so the handler should stop; its run fails for good."""

    def __init__(self, root_id: object, cost: object, cap: object) -> None:
        self.root_id = root_id
        self.cost = cost
        self.cap = cap
        super().__init__(
            f"the run tree of {root_id} recorded a cost of {cost}, which reached its "
            f"spend cap of {cap}"
        )


class UncertainOutcome(RunqueueError):
    """Raised by a tool: it may or may not have happened (a timeout after the
    request was sent, say). Recorded as ``uncertain``, never retried."""


class RunCancelled(RunqueueError):
    """Raised by every ``ctx`` call once the run is cancelled, lost to another
    worker (fenced) or its worker is stopping: the handler should return.
    ``reason`` is ``cancelled``, ``fenced`` or ``stopping``."""

    def __init__(self, run_id: object, reason: str) -> None:
        super().__init__(f"run {run_id} is no longer this handler's to run ({reason})")
        self.run_id = run_id
        self.reason = reason


#: Failure classifications recorded in ``Run.failure["classification"]``.
PERMANENT = "permanent"
TRANSIENT = "transient"
LEASE_EXPIRED = "lease_expired"
#: Run deadlines (docs/decisions/sessions.md, "Run deadlines"): a run not claimed
#: within its ``start_within`` (cancelled), an attempt past its
#: ``max_duration`` (failed, never retried).
EXPIRED = "expired"
MAX_DURATION = "max_duration"
#: A run tree whose recorded cost reached its ``spend_cap``: its live runs
#: are cancelled with this reason (docs/decisions/run-trees.md, "Usage and cost").
SPEND_CAP = "spend_cap"


def classify(exc: BaseException, transient: tuple[type[BaseException], ...] = ()) -> str:
    """The failure taxonomy: TransientError and the configured transient
    exception classes are transient; everything else is permanent."""
    if isinstance(exc, PermanentError):
        return PERMANENT
    if isinstance(exc, TransientError) or (transient and isinstance(exc, transient)):
        return TRANSIENT
    return PERMANENT
