"""How one attempt at a run ended, and how one tool call ended, as values.

The runtime decides an outcome and writes nothing; the worker's slot group
writes it (``runqueue.leases.write`` or, batched with the next claim,
``runqueue.leases.finish_and_claim``), fenced by the lease's epoch. An
outcome is always storable: ``Succeeded.of`` refuses a result PostgreSQL's
jsonb would reject, so the runtime can turn it into a failure instead.
A tool call's ``ToolOutcome`` is what ``ctx.invoke_tool`` returns; the
worker's observers (``observe`` and ``tracing`` in ``runqueue.observability``)
read it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from runqueue.leases.failures import Failure
from runqueue.limits import MAX_WAIT_SECONDS
from runqueue.types import JSON
from runqueue.validation import as_utc, check_state, json_text


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The handler returned ``result``."""

    result: JSON
    #: ``result`` as JSON text, checked once when the outcome is made.
    text: str = field(repr=False)
    name: ClassVar[str] = "succeeded"

    @classmethod
    def of(cls, result: JSON) -> Succeeded:
        """ValueError if ``result`` cannot be stored."""
        return cls(result, json_text(result, "result"))


@dataclass(frozen=True, slots=True)
class Failed:
    """A permanent failure: the run is dead-lettered now, never retried."""

    failure: Failure
    name: ClassVar[str] = "failed"


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A transient failure: the lease is given up; requeued with backoff, or
    dead-lettered on the last attempt."""

    error: BaseException
    name: ClassVar[str] = "gave_up"


@dataclass(frozen=True, slots=True)
class Waiting:
    """The turn ends waiting for the user (``ctx.ask_user``), until
    ``timeout`` seconds have passed if it is set."""

    question: JSON
    state: JSON
    tool_seq: int
    timeout: float | None = None
    name: ClassVar[str] = "waiting"

    @classmethod
    def of(
        cls, question: JSON, state: JSON, tool_seq: int, timeout: float | None = None
    ) -> Waiting:
        """ValueError if the question or the state cannot be stored (the one
        check of both, for the runtime and a direct ``wait_for_user``), or
        the timeout is not a positive number of seconds."""
        json_text(question, "question")
        check_state(state)
        return cls(question, state, tool_seq, positive_seconds(timeout))


@dataclass(frozen=True, slots=True, kw_only=True)
class Suspended:
    """The turn ends waiting for its children, a signal or a time
    (``ctx.wait_for_children``, ``wait_for_signal``, ``sleep_until``): a
    ``reason`` of ``runqueue.models.WaitReason``, the signal's name, and
    the deadline, as a time (``until``) or seconds from now (``timeout``)."""

    reason: str
    wait_name: str = ""
    until: dt.datetime | None = None
    timeout: float | None = None
    state: JSON = None
    tool_seq: int = 0
    #: An event wait's match (``ctx.wait_for_event``); None for other waits.
    match: dict[str, JSON] | None = None
    name: ClassVar[str] = "waiting"


def positive_seconds(value: float | dt.timedelta | None) -> float | None:
    """Seconds as a float, from a number or a timedelta; ValueError unless
    positive and at most ``MAX_WAIT_SECONDS`` (a longer one would fail in
    the database, at the outcome's write, not here)."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a timeout must be seconds or a timedelta, got {type(value).__name__}")
    if not 0 < value < float("inf"):
        raise ValueError(f"a timeout must be a positive number of seconds, got {value}")
    if value > MAX_WAIT_SECONDS:
        raise ValueError(
            f"a timeout must be at most {MAX_WAIT_SECONDS:.0f} seconds (100 years), got {value}"
        )
    return float(value)


def wake_time(value: dt.datetime | None) -> dt.datetime | None:
    """A wait's time (``sleep_until``) in UTC; ValueError unless aware and
    within Python's years once in UTC (a later one could not be read back)."""
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValueError(f"sleep_until needs an aware datetime, got {value!r}")
    try:
        return as_utc(value)
    except ValueError as exc:  # out of range (TIME_RANGE), or an unusable zone
        raise ValueError(f"sleep_until's time {exc}, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class Released:
    """The handler stopped because its worker is stopping: the run is given
    back (queued at once, the attempt returned), as a shutdown does."""

    reason: str
    name: ClassVar[str] = "released"


@dataclass(frozen=True, slots=True)
class BudgetWait:
    """The handler waits for a budget (``ctx.wait_for_budget``): the run is
    queued again at once, its attempt handed back, its next call declared
    (key, tokens), so the claim reserves that call before the handler
    resumes (from ``state``, saved as a checkpoint)."""

    key: str
    tokens: int
    state: JSON
    tool_seq: int
    name: ClassVar[str] = "budget_wait"


Outcome = Succeeded | Failed | GaveUp | Waiting | Suspended | Released | BudgetWait


class Reported(StrEnum):
    """What became of a lease a worker held, as it reports it (the log
    line's ``outcome``, the finishes metric's label): every value the
    worker can report, in one place."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: A transient give-up with attempts left: queued again with backoff.
    REQUEUED = "requeued"
    #: Waiting for the user's input.
    WAITING = "waiting"
    #: The write matched nothing: another worker owns the run, or it was cancelled.
    FENCED = "fenced"
    #: The runtime failed or lost the database: left to lease expiry.
    ERROR = "error"
    #: Claimed ahead and never started: queued again at once.
    GIVEN_BACK = "given_back"
    #: Queued again until its next model call fits its budget.
    BUDGET_WAIT = "budget_wait"


#: Outcomes written together with the next claim (one statement).
Finish = Succeeded | Failed


ToolStatusName = Literal["completed", "failed", "uncertain", "rejected", "fenced"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutcome:
    """How a tool invocation ended.

    ``uncertain``: the call started on an earlier attempt and its outcome is
    unknown (it may have happened). ``rejected``: a person rejected it (a
    call made with ``approval``): never run, ``error["message"]`` gives the
    reason. ``fenced``: not run, because this worker lost the run.
    ``approval``: for a call made with ``approval``, what was asked and
    decided (who, when, the decision; ``respond``'s ``value`` is the
    person's result, not the tool's).
    """

    status: ToolStatusName
    seq: int
    value: JSON = None
    error: JSON = None
    replayed: bool = False
    resolution: JSON = None
    approval: JSON = None

    @property
    def ok(self) -> bool:
        return self.status == "completed"
