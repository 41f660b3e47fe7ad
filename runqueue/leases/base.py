"""The lease a worker holds, backoff, the test hooks and the helpers the
rest of runqueue.leases shares."""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import OperationalError, connection

from runqueue.conf import get_settings
from runqueue.db import sqlstate
from runqueue.errors import InvalidArgument, RunNotFound
from runqueue.events import wakeups
from runqueue.models import (
    PriorityClass,
    Run,
)
from runqueue.sql import execute
from runqueue.validation import json_text

logger = logging.getLogger("runqueue.leases")

#: Attempts of a statement that met a row moved between partitions.
MOVED_ATTEMPTS = 3
#: Attempts of a transaction that met a deadlock (a cascading cancel locks a
#: parent, then its children; a child's terminal transition its own row,
#: then its parent's: runqueue_join), on either side.
DEADLOCK_ATTEMPTS = 5
#: A retry after a deadlock first waits up to this, times the attempt.
DEADLOCK_PAUSE_SECONDS = 0.05


def deadlock_pause(attempt: int) -> None:
    """Before running again a transaction PostgreSQL ended to break a
    deadlock (40P01: it wrote nothing). Both sides of such a cycle retry,
    and run again at once they can meet the same way again (a finish lost
    three in a row to a cancel retrying beside spawns). A random pause lets
    one of them go first."""
    time.sleep(random.uniform(0, DEADLOCK_PAUSE_SECONDS * attempt))  # noqa: S311


def retry_deadlocks[T](what: str, transaction_: Callable[[], T]) -> T:
    """Run ``transaction_`` (a transaction of its own) again when it met a
    deadlock (at most DEADLOCK_ATTEMPTS times, after ``deadlock_pause``) or
    a row moved by another (``retry_moved``); ``what`` names it in the log."""
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return retry_moved(transaction_)
        except OperationalError as exc:
            if attempt == DEADLOCK_ATTEMPTS or sqlstate(exc) != "40P01":
                raise
            logger.info("The %s met a deadlock; run again", what)
            deadlock_pause(attempt)
    raise AssertionError("unreachable")


def moved_by_another(exc: BaseException) -> bool:
    """A run row this statement waited for was moved to another partition
    by the transaction it waited for (it finished, or a dead letter was
    requeued; migration 0009). PostgreSQL answers 40001 instead of
    re-reading the row, and the statement wrote nothing: run it again and
    it reads the row where it is now."""
    return sqlstate(exc) == "40001" and "moved to another partition" in str(exc.__cause__)


def retry_moved[T](statement: Callable[[], T]) -> T:
    """Run ``statement`` (a transaction of its own) again while it meets a
    row moved by another, at most MOVED_ATTEMPTS times in all."""
    for attempt in range(1, MOVED_ATTEMPTS + 1):
        try:
            return statement()
        except OperationalError as exc:
            if (
                attempt == MOVED_ATTEMPTS
                or connection.in_atomic_block
                or not moved_by_another(exc)
            ):
                raise
            logger.info("Run row moved by another transaction; statement run again")
    raise AssertionError("unreachable")


ALL_CLASSES: tuple[PriorityClass, ...] = tuple(PriorityClass)


@dataclass
class Hooks:
    """Observation points for tests that interleave real connections
    (River's TestSignals): a test may pause a thread in one. Both are None in
    production, and setting one never changes which path the code takes."""

    #: Called inside a worker transaction that writes more than its fence
    #: (a checkpoint, a tool record, an event...), after the fence row,
    #: before commit. A fence alone is one autocommit statement: no call.
    inside_fence: Callable[[Lease, str], None] | None = None
    #: Called inside the sweep's transaction, after its UPDATE, before commit.
    inside_sweep: Callable[[list[tuple]], None] | None = None


hooks = Hooks()

#: Told of every lease a write found lost (``current``: the run's (epoch,
#: status), or None if it is gone), with the action that found out; set by
#: ``runqueue.observability.observe`` (imported by the app's ready()), which records the
#: metric, the span event and the log line. A hook, so this package does not
#: import the observability above it.
FencedObserver = Callable[["Lease", str, "tuple | None"], None]


@dataclass
class Observers:
    fenced: FencedObserver | None = None


observers = Observers()


@dataclass(frozen=True, slots=True)
class Reservation:
    """A model call reserved on a budget and not settled yet: ``at`` is when
    (the database clock), so a refund goes back to the bucket it came from."""

    key: str
    tokens: int
    at: dt.datetime


@dataclass(eq=False)
class Lease:
    """A worker's hold on one run at one epoch; shared by its threads."""

    run: Run
    owner: str
    lease_seconds: float
    #: Another worker owns the run now (or it was cancelled): write nothing.
    fenced: bool = False
    #: This worker finished, gave up or released the run: the lease is spent.
    closed: bool = False
    #: When it was claimed and when a slot started running it
    #: (``time.monotonic()``; 0 until then).
    claimed: float = field(default_factory=time.monotonic)
    started: float = 0.0
    #: The handler returned and its slot handed the outcome over (the lease
    #: is held until the outcome is written).
    returned: bool = False
    #: Set when the handler must stop: the run was cancelled or lost
    #: (``cancel_reason`` says which: cancelled, fenced, stopping). A sync
    #: handler may wait on it or hand it to an HTTP client.
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    cancel_reason: str = ""
    #: When it was set (``time.monotonic()``; 0 until then).
    cancelled_at: float = 0.0
    #: The run was paused (runqueue.capacity.pausing.pause_run): the handler's next
    #: ``ctx`` call raises RunPaused and the run is given back. Nothing is
    #: interrupted meanwhile (an async handler's task is not cancelled), so
    #: a tool call in flight finishes and is recorded.
    paused: bool = False
    _on_cancel: list[Callable[[], object]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # One worker transaction at a time per lease (handler and heartbeat
    # threads share it), so a heartbeat never races its own finish.
    write_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: Calls reserved on budgets and not settled, oldest first: the claim's
    #: (a run with a budget is claimed only once its call is reserved) and
    #: each ``ctx.reserve`` that fitted.
    reservations: list[Reservation] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        run = self.run
        if run.budget_key is not None and run.heartbeat_at is not None:
            # The claim wrote heartbeat_at = now(), the instant it reserved.
            at = run.heartbeat_at
            self.reservations.append(Reservation(run.budget_key, run.budget_tokens or 0, at))

    @property
    def run_id(self) -> uuid.UUID:
        return self.run.id

    def mark_fenced(self) -> bool:
        """Mark the lease fenced; False if it already was (``run.fenced`` is
        recorded once per lease, whichever thread finds out first). The
        handler is told to stop (``cancel``)."""
        with self._lock:
            if self.fenced:
                return False
            self.fenced = True
        self.cancel("fenced")
        return True

    def cancel(self, reason: str) -> bool:
        """Tell the handler to stop (``RunCancelled``, ``asyncio.CancelledError``);
        False if it was told already. Writes nothing: the fence stays the
        only judge of what may still be written."""
        with self._lock:
            if self.cancelled.is_set():
                return False
            self.cancel_reason = reason
            self.cancelled_at = time.monotonic()
            self.cancelled.set()
            callbacks, self._on_cancel = self._on_cancel, []
        for callback in callbacks:
            callback()
        return True

    def pause(self) -> None:
        """Give the run back at the handler's next step (``paused``)."""
        self.paused = True

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (from any thread) when the lease is cancelled; at
        once if it already is."""
        with self._lock:
            if not self.cancelled.is_set():
                self._on_cancel.append(callback)
                return
        callback()

    @property
    def epoch(self) -> int:
        return self.run.lease_epoch

    @property
    def token(self) -> uuid.UUID | None:
        """The claim's random token: with the epoch, what every fenced write
        matches (an epoch a lost claim had can be issued again; a token cannot)."""
        return self.run.lease_token

    @property
    def attempt(self) -> int:
        return self.run.attempts


def backoff(attempts: int, *, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``attempts``: base * 2**(attempts-1), capped, jittered.

    With the defaults (base 2 s, cap 600 s, jitter 0.2): about 2, 4, 8, ... s,
    each multiplied by a random factor in [0.8, 1.2).
    """
    conf = get_settings()
    # A float exponent at most 1023: 2.0**1024 would raise OverflowError (a
    # run with thousands of attempts would stop the sweep for every run);
    # a product past the float range is inf, and the cap takes it.
    growth = 2.0 ** min(max(attempts - 1, 0), 1023)
    delay = min(conf.BACKOFF_BASE_SECONDS * growth, conf.BACKOFF_MAX_SECONDS)
    jitter = conf.BACKOFF_JITTER * (2 * (rng or random).random() - 1)
    return max(delay * (1 + jitter), 0.0)


# --- helpers -----------------------------------------------------------------


def notify_payload(priority: int) -> str:
    """The NOTIFY payload that wakes the workers of a priority's class."""
    return wakeups.payload(wakeups.due(priority))


def notify(priority: int | None) -> None:
    """Wake idle workers of a class (all classes when None), on commit."""
    wakeups.send(wakeups.due(priority))


def notify_cancel(run_id: uuid.UUID, epoch: int) -> None:
    """Tell the worker running ``run_id`` to stop its handler, on commit."""
    wakeups.send(wakeups.Cancelled(run_id=run_id, epoch=epoch))


def lock_run(run_id: uuid.UUID) -> tuple[str, str | None, str | None, int]:
    """Lock run ``run_id``'s row in the caller's transaction: its status,
    wait reason, wait name and priority; RunNotFound if there is none."""
    with connection.cursor() as cursor:
        row = execute(cursor, "lock_run", {"run_id": run_id}).fetchone()
    if row is None:
        raise RunNotFound(run_id)
    status, wait_reason, wait_name, priority = row
    return status, wait_reason, wait_name, priority


def check_json(value: object, what: str) -> None:
    """Reject what PostgreSQL's jsonb would refuse, before anything is written."""
    json_text(value, what)


def check_json_size(
    operation: str,
    name: str,
    value: object,
    what: str,
    limit: int,
    too_large: Callable[[int, int], InvalidArgument] | None = None,
) -> None:
    """InvalidArgument(operation, name, why) unless jsonb can store
    ``value`` (``what`` in the words) in at most ``limit`` bytes of JSON
    text; past the limit, ``too_large(size, limit)`` if given. Before
    anything is written."""
    try:
        text = json_text(value, what)
    except ValueError as exc:
        raise InvalidArgument(operation, name, str(exc)) from None
    if (size := len(text.encode())) > limit:
        if too_large is not None:
            raise too_large(size, limit)
        problem = f"must be at most {limit} bytes as JSON, got {size}"
        raise InvalidArgument(operation, name, problem)
