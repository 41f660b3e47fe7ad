"""runqueue: a durable run queue on PostgreSQL for Django.

The public API. Names backed by models load on first use, so importing
``runqueue`` before the app registry is ready is safe.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from runqueue.errors import (
    ActiveRunConflict,
    ApprovalPending,
    ChildrenGone,
    ForkRefused,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidArgument,
    InvalidSubmission,
    InvalidTransition,
    MailboxFull,
    NotAwaitingApproval,
    PermanentError,
    RunCancelled,
    RunNotFound,
    RunPaused,
    RunqueueError,
    SessionQueueFull,
    SpendCapReached,
    ToolCallNotFound,
    TransientError,
    UncertainOutcome,
    UnknownKind,
)

if TYPE_CHECKING:  # what checkers and IDEs see; at run time, _LAZY loads them
    # "as" marks each a re-export (``__all__`` names them through _LAZY).
    from runqueue.capacity.budgets import pause_budget as pause_budget
    from runqueue.capacity.pausing import pause_run as pause_run
    from runqueue.capacity.pausing import resume_run as resume_run
    from runqueue.events.inbound import send_event as send_event
    from runqueue.history.forking import fork as fork
    from runqueue.leases import cancel as cancel
    from runqueue.leases import decide_tool as decide_tool
    from runqueue.leases import deliver_input as deliver_input
    from runqueue.leases import signal as signal
    from runqueue.models import Idempotency as Idempotency
    from runqueue.models import PriorityClass as PriorityClass
    from runqueue.models import RunStatus as RunStatus
    from runqueue.reads.sessions import Session as Session
    from runqueue.reads.sessions import session as session
    from runqueue.registry import handler as handler
    from runqueue.registry import on_event as on_event
    from runqueue.runtime import Interrupted as Interrupted
    from runqueue.runtime import RunContext as RunContext
    from runqueue.runtime import ToolOutcome as ToolOutcome
    from runqueue.submission.keys import Submission as Submission
    from runqueue.submission.submit import SubmitRequest as SubmitRequest
    from runqueue.submission.submit import submit as submit
    from runqueue.submission.submit import submit_many as submit_many

_LAZY = {
    "submit": "runqueue.submission.submit",
    "Submission": "runqueue.submission.keys",
    "SubmitRequest": "runqueue.submission.submit",
    "submit_many": "runqueue.submission.submit",
    "cancel": "runqueue.leases",
    "decide_tool": "runqueue.leases",
    "deliver_input": "runqueue.leases",
    "fork": "runqueue.history.forking",
    "pause_budget": "runqueue.capacity.budgets",
    "pause_run": "runqueue.capacity.pausing",
    "resume_run": "runqueue.capacity.pausing",
    "signal": "runqueue.leases",
    "PriorityClass": "runqueue.models",
    "RunStatus": "runqueue.models",
    "Idempotency": "runqueue.models",
    "handler": "runqueue.registry",
    "on_event": "runqueue.registry",
    "send_event": "runqueue.events.inbound",
    "RunContext": "runqueue.runtime",
    "Interrupted": "runqueue.runtime",
    "ToolOutcome": "runqueue.runtime",
    "session": "runqueue.reads.sessions",
    "Session": "runqueue.reads.sessions",
}

__all__ = [
    "ActiveRunConflict",
    "ApprovalPending",
    "ChildrenGone",
    "ForkRefused",
    "IdempotencyConflict",
    "IdempotencyInProgress",
    "InvalidArgument",
    "InvalidSubmission",
    "InvalidTransition",
    "MailboxFull",
    "NotAwaitingApproval",
    "PermanentError",
    "RunCancelled",
    "RunNotFound",
    "RunPaused",
    "RunqueueError",
    "SpendCapReached",
    "SessionQueueFull",
    "ToolCallNotFound",
    "TransientError",
    "UncertainOutcome",
    "UnknownKind",
    *_LAZY,
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'runqueue' has no attribute {name!r}")
