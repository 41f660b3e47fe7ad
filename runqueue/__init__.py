"""runqueue: a durable run queue on PostgreSQL for Django.

The public API. Names backed by models load on first use, so importing
``runqueue`` before the app registry is ready is safe.
"""

from importlib import import_module
from typing import Any

from runqueue.errors import (
    ActiveRunConflict,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidSubmission,
    InvalidTransition,
    PermanentError,
    RunNotFound,
    RunqueueError,
    TransientError,
    UncertainOutcome,
    UnknownKind,
)

_LAZY = {
    "submit": "runqueue.submission",
    "Submission": "runqueue.submission",
    "SubmitRequest": "runqueue.submission",
    "submit_many": "runqueue.submission",
    "cancel": "runqueue.leases",
    "PriorityClass": "runqueue.models",
    "RunStatus": "runqueue.models",
    "Idempotency": "runqueue.models",
    "handler": "runqueue.registry",
    "RunContext": "runqueue.runtime",
    "ToolOutcome": "runqueue.runtime",
}

__all__ = [
    "ActiveRunConflict",
    "IdempotencyConflict",
    "IdempotencyInProgress",
    "InvalidSubmission",
    "InvalidTransition",
    "PermanentError",
    "RunNotFound",
    "RunqueueError",
    "TransientError",
    "UncertainOutcome",
    "UnknownKind",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'runqueue' has no attribute {name!r}")
