"""The dead-letter record kept in ``Run.failure``: its shape (``Failure``)
and the one function that builds it.

Every failure a run stores is built by ``failure_record``: the runtime's
permanent failures, a transient give-up on the last attempt, and the
sweeper's expired lease (passed to its SQL as a parameter). The event
``run.failed`` carries its summary, without the traceback.
"""

from __future__ import annotations

import traceback
from typing import TypedDict, cast

from runqueue.errors import LEASE_EXPIRED, PERMANENT


class Failure(TypedDict):
    """A failure as stored in ``Run.failure``: enough to act on."""

    #: ``errors.PERMANENT``, ``errors.TRANSIENT`` or ``errors.LEASE_EXPIRED``.
    classification: str
    error_type: str | None
    message: str
    traceback: str | None
    attempt: int


class FailureSummary(TypedDict):
    """A failure without its traceback: the data of a ``run.failed`` event."""

    classification: str
    error_type: str | None
    message: str
    attempt: int


def failure_record(
    exc: BaseException | None,
    *,
    classification: str,
    attempt: int,
    message: str | None = None,
    error_type: str | None = None,
) -> Failure:
    """The one builder of a ``Failure``; ``error_type`` and ``message``
    default to the exception's."""
    return {
        "classification": classification,
        "error_type": error_type if error_type is not None else _type_name(exc),
        "message": message if message is not None else str(exc),
        "traceback": "".join(traceback.format_exception(exc)) if exc is not None else None,
        "attempt": attempt,
    }


def _type_name(exc: BaseException | None) -> str | None:
    return type(exc).__name__ if exc is not None else None


def permanent_failure(exc: BaseException, attempt: int) -> Failure:
    """A handler's permanent failure on ``attempt``: dead-lettered now."""
    return failure_record(exc, classification=PERMANENT, attempt=attempt)


def lease_expired_failure(attempts: int, max_attempts: int) -> Failure:
    """The sweeper's dead letter: the lease expired on the last attempt."""
    return failure_record(
        None,
        classification=LEASE_EXPIRED,
        attempt=attempts,
        error_type="LeaseExpired",
        message=f"lease expired on attempt {attempts} of {max_attempts}",
    )


_SUMMARY_KEYS = ("classification", "error_type", "message", "attempt")


def failure_summary(failure: Failure) -> FailureSummary:
    """What ``run.failed`` carries: the failure less its traceback. (A
    failure built by hand for ``leases.fail`` may lack a key: None then.)"""
    return cast(FailureSummary, {key: failure.get(key) for key in _SUMMARY_KEYS})
