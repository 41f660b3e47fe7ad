"""One slot group: its claims, its slots' outcomes and its leases, written
by one thread.

A slot decides how its run ended (``runtime.decide``), hands the outcome to
its group and waits for its next lease. The group thread is the only writer
of those outcomes and the only place the group's leases end: each round it
writes every outcome handed over since the last one and claims the next
runs for the idle slots in the same statement (``leases.finish_and_claim``,
one commit however many runs it carries), fenced per run as always. A
transient give-up or a wait for the user is written alone, in the same
round, before it.

Claim-ahead: once the group's runs have been short (``AHEAD_BELOW_SECONDS``
on average), a round may claim up to ``ahead`` leases beyond the idle
slots. They wait in ``ready`` for the next slot to
hand an outcome over, so that slot starts at once and the next round
carries several outcomes. They are held like any other lease (heartbeated,
given back at shutdown, fenced if lost: a lease found fenced is never
started), and one that waited ``AHEAD_WAIT_SECONDS`` for a slot is given
back, so a run never waits long behind a busy slot while another worker
could run it. Until runs are known to be short, and while they are long,
the group claims for its idle slots only; a group that takes the
interactive class never claims ahead.

A run is never claimed for a slot that is not idle or about to be: what is
claimed starts at once or as soon as a run of the group ends.

Room: the group runs at most ``size`` runs at once. A slot thread that
hands an async run to the event loop (``runqueue.worker.slot.LoopRuns``) is
idle again while the run still counts: the run hands its outcome over
itself (``hand_over``), and every claim is for the room left, not for the
idle slots.

Pickup: a group that never claims ahead (the interactive class's) claims
for its idle slots in the thread that learns runs are due (the LISTEN
thread, ``wake``) and hands each lease straight to its slot: a wake-up
crosses one thread boundary (listener to slot) instead of two, and each
boundary can cost a GIL switch interval (5 ms) while another thread runs
Python. Only claims move there: outcomes are still written by the group
thread alone. The idle slots a claim is for are taken out of the idle list
while it runs, so the group thread and the waking thread never claim for
the same slot.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from django.db import DatabaseError, DataError, IntegrityError, connection

from runqueue import leases
from runqueue.db import connection_lost
from runqueue.errors import PERMANENT
from runqueue.leases.failures import failure_record
from runqueue.leases.outcomes import Failed, Outcome, Reported, Succeeded
from runqueue.models import PriorityClass
from runqueue.worker.services import ConnectionCheck, reconnect_delay, retrying

logger = logging.getLogger("runqueue.worker")

#: Claim ahead only while the group's runs take less than this on average.
AHEAD_BELOW_SECONDS = 0.1
#: A lease claimed ahead that waited this long for a slot is given back.
AHEAD_WAIT_SECONDS = 1.0


#: ``Group._exchange``: no lease ready, the box waits for one.
class _Wait:
    pass


_WAIT = _Wait()

#: What a slot hands over: its lease and how the run ended (None: the
#: runtime failed or lost the database; the lease is left to expire).
Done = tuple[leases.Lease, Outcome | None]


class Dispatch(Protocol):
    """What a slot needs of its group."""

    def exchange(self, box: Box, done: Done | None) -> leases.Lease | None: ...


class Box:
    """A slot thread's mailbox: its next lease, or None when the group stops."""

    __slots__ = ("event", "lease")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.lease: leases.Lease | None = None

    def arm(self) -> None:
        """About to wait (under the group's lock)."""
        self.event.clear()
        self.lease = None

    def deliver(self, lease: leases.Lease | None) -> None:
        """Hand over the next lease (None: stop), from any thread."""
        self.lease = lease
        self.event.set()


class LoopBox(Box):
    """The mailbox of a slot on the event loop: a future instead of an event."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.future: asyncio.Future[leases.Lease | None] = loop.create_future()

    def arm(self) -> None:
        self.lease = None
        self.future = self.loop.create_future()  # on the loop's thread

    def deliver(self, lease: leases.Lease | None) -> None:
        self.lease = lease
        future = self.future
        self.loop.call_soon_threadsafe(_resolve, future, lease)


def _resolve(future: asyncio.Future[leases.Lease | None], lease: leases.Lease | None) -> None:
    if not future.done():
        future.set_result(lease)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    """One slot group's shape and claim settings (``Pool`` builds one per
    ``--slots`` spec)."""

    label: str
    classes: tuple[PriorityClass, ...]
    #: Runs at once, at most.
    size: int
    #: The slots (threads or coroutines) that take its leases; 0: ``size``.
    #: Fewer than ``size`` when a large group's threads hand their async
    #: runs to the event loop (``hand_over``).
    slots: int = 0
    #: The owner its leases carry: ``<worker id>/<label>``.
    owner: str
    lease_seconds: float
    #: At most this many runs per claim statement.
    claim_batch: int = 32
    #: Leases held beyond the idle slots while runs are short (interactive: never).
    ahead: int = 0
    #: The poll under NOTIFY: claim at least this often while a slot is idle.
    poll_seconds: float = 5.0
    #: Stop once the queue is empty and every slot is idle.
    burst: bool = False

    @property
    def claims_ahead(self) -> int:
        """Leases claimed ahead at most: an interactive run never waits behind another."""
        return 0 if PriorityClass.INTERACTIVE in self.classes else max(0, self.ahead)


class Group(threading.Thread):
    def __init__(
        self, config: GroupConfig, *, finished: Callable[[leases.Lease, Reported], None]
    ) -> None:
        super().__init__(name=f"runqueue-group-{config.label}", daemon=True)
        self.config = config
        self.label = config.label
        self.classes = config.classes
        self.class_names = frozenset(c.slug for c in config.classes)
        self.size = config.size
        self.boxes = config.slots or config.size
        self.claim_batch = max(1, config.claim_batch)
        self.ahead = config.claims_ahead
        #: Wake-ups claim for idle slots in the waking thread (``wake``).
        self.claims_on_wake = self.ahead == 0 and not config.burst
        self._finished = finished
        self._cond = threading.Condition()
        self._outcomes: list[Done] = []
        self._idle: deque[Box] = deque()
        self._ready: deque[leases.Lease] = deque()
        self._held: set[leases.Lease] = set()
        #: Runs started and not handed back (on a slot, or on the loop).
        self._busy = 0
        #: Idle slots a claim on wake-up took (``wake``): room kept for them.
        self._reserved = 0
        #: Runs may be due: the last claim was full, or a NOTIFY or poll said so.
        self._due = True
        #: Bumped by every wake-up, so one that lands during a claim is kept.
        self._wakes = 0
        #: The group thread is claiming: a wake-up leaves the claim to it.
        self._claiming = False
        #: Claims running in a waking thread: the group thread outlives them.
        self._inflight = 0
        self._stopping = False
        self._closed = False
        #: Average run time (seconds; unknown until a run ended): claim
        #: ahead only for short runs.
        self._run_seconds = float("inf")
        self._wake_check = ConnectionCheck()
        #: Statements written, and outcomes in them (logged at shutdown).
        self.rounds = 0
        self.outcomes_written = 0
        #: Claims made by the waking thread (``wake``).
        self.claims_on_wakes = 0

    def _spec(self, limit: int) -> leases.ClaimSpec:
        return leases.ClaimSpec(self.config.owner, self.classes, limit, self.config.lease_seconds)

    # --- slots (their threads) -------------------------------------------------

    def exchange(self, box: Box, done: Done | None) -> leases.Lease | None:
        """Hand over how the last run ended; wait for the next lease (None: stop)."""
        lease = self._exchange(box, done)
        if not isinstance(lease, _Wait):
            return lease
        box.event.wait()
        return box.lease

    async def exchange_async(self, box: LoopBox, done: Done | None) -> leases.Lease | None:
        """``exchange`` for a slot on the event loop: awaits instead of blocking."""
        lease = self._exchange(box, done)
        if not isinstance(lease, _Wait):
            return lease
        return await box.future

    def _exchange(self, box: Box, done: Done | None) -> leases.Lease | None | _Wait:
        """A lease ready now, None to stop, or ``_WAIT`` (the box is idle)."""
        with self._cond:
            if done is not None:
                self._returned(done)
            if self._stopping:
                return None
            if (lease := self._next_ready()) is not None:
                return lease
            box.arm()
            self._idle.append(box)
            self._cond.notify()
        return _WAIT

    def hand_over(self, done: Done) -> None:
        """How a run a slot thread handed to the event loop ended (the
        thread took other leases meanwhile): written like any outcome."""
        with self._cond:
            self._returned(done)
            # Room again: a lease claimed ahead starts on an idle slot.
            while self._idle and not self._stopping:
                lease = self._next_ready()
                if lease is None:
                    break
                self._idle.popleft().deliver(lease)

    def _returned(self, done: Done) -> None:
        """Under the lock: a run ended; its outcome is the group thread's to write."""
        done[0].returned = True
        self._busy -= 1
        self._outcomes.append(done)
        self._cond.notify()

    def _next_ready(self) -> leases.Lease | None:
        """Under the lock: a lease claimed ahead, started, if there is room."""
        while self._ready and self._room() > 0:
            lease = self._ready.popleft()
            if lease.fenced or lease.cancelled.is_set():
                # Lost or cancelled while held ahead: never started.
                self._held.discard(lease)
                continue
            return self._start(lease)
        return None

    def _room(self) -> int:
        """Under the lock: runs the group may start now (``size`` at once)."""
        return self.size - self._busy - self._reserved

    def _start(self, lease: leases.Lease) -> leases.Lease:
        self._busy += 1
        lease.started = time.monotonic()
        return lease

    # --- the pool ------------------------------------------------------------------

    def wake(self) -> None:
        """Runs of the group's classes may be due (a NOTIFY).

        A group that never claims ahead claims for its idle slots here, in
        the caller's thread, unless the group thread is claiming already."""
        with self._cond:
            self._due = True
            self._wakes += 1
            boxes: list[Box] = []
            if self.claims_on_wake and not (self._claiming or self._stopping):
                room = min(self.claim_batch, self._room())
                while self._idle and len(boxes) < room:
                    boxes.append(self._idle.popleft())
            if not boxes:
                self._cond.notify()
                return
            wakes = self._wakes
            self._inflight += 1
            self._reserved += len(boxes)
        self._claim_for(boxes, wakes)

    def _claim_for(self, boxes: list[Box], wakes: int) -> None:
        """Claim for ``boxes`` (taken out of the idle list) and hand each
        lease to its slot; the boxes left over go back. On an error the
        group thread claims instead, with its backoff."""
        self._wake_check()
        reserved = len(boxes)
        try:
            _written, claimed = leases.finish_and_claim([], self._spec(len(boxes)))
        except Exception as exc:
            if isinstance(exc, DatabaseError):
                logger.warning("%s: claim on wake-up failed (%s)", self.name, exc)
                connection.close()
            else:
                logger.exception("%s: claim on wake-up failed", self.name)
            claimed, failed = [], True
        else:
            failed = False
        with self._cond:
            self._inflight -= 1
            self._reserved -= reserved
            self._held.update(claimed)
            self.claims_on_wakes += 1
            for lease in claimed:
                box = boxes.pop(0)
                if self._stopping:
                    # Held, never started: the group thread gives it back.
                    self._ready.append(lease)
                    box.deliver(None)
                else:
                    box.deliver(self._start(lease))
            # Short: the queue is drained, unless a wake-up landed meanwhile.
            self._due = failed or not boxes or self._wakes != wakes
            if self._stopping:
                for box in boxes:
                    box.deliver(None)
            else:
                self._idle.extendleft(reversed(boxes))
            if boxes or self._stopping:
                # Idle slots again (a short or failed claim: every box is
                # left), or a stop waiting for this claim (close sets
                # _stopping too). Not after a claim that filled every slot:
                # the group thread would have nothing to do, and waking it
                # only makes the slot thread wait for the GIL behind it.
                self._cond.notify()

    def held(self) -> list[leases.Lease]:
        with self._cond:
            return list(self._held)

    def stop(self) -> None:
        """Claim no more; idle slots stop, busy ones hand their outcome over."""
        with self._cond:
            self._stopping = True
            self._release_idle()
            self._cond.notify()

    def close(self) -> None:
        """After the grace period: write what was handed over, give back every
        lease still held (the release's epoch bump fences a handler still
        running), and end the thread."""
        with self._cond:
            self._stopping = self._closed = True
            self._release_idle()
            self._cond.notify()

    def _release_idle(self) -> None:
        while self._idle:
            self._idle.popleft().deliver(None)

    # --- the thread ---------------------------------------------------------------------

    def run(self) -> None:
        check = ConnectionCheck()
        delay = 0.5
        try:
            while True:
                with self._cond:
                    want = self._wait_for_work()
                    if want is None:
                        break
                    outcomes, self._outcomes = self._outcomes, []
                    wakes = self._wakes
                    self._claiming = want > 0
                check()
                try:
                    claimed = self._round(outcomes, want)
                except Exception as exc:
                    if isinstance(exc, DatabaseError):
                        connection.close()
                    if isinstance(exc, DatabaseError) and connection_lost(exc):
                        # Lost, or a server that turned read-only: reconnect
                        # soon, whatever the outage's length (a failover's
                        # new primary is claimed from within about a second).
                        wait = reconnect_delay()
                        logger.warning(
                            "%s: connection lost (%s); reconnecting in %.1fs",
                            self.name,
                            exc,
                            wait,
                        )
                    elif isinstance(exc, DatabaseError):
                        wait, delay = delay, min(delay * 2, 30)
                        logger.warning("%s: database error (%s)", self.name, exc)
                    else:
                        wait, delay = delay, min(delay * 2, 30)
                        logger.exception("%s: writing a round failed", self.name)
                    with self._cond:
                        self._claiming = False
                        self._cond.wait_for(lambda: self._stopping, wait)
                    continue
                delay = 0.5
                self._hand_out(claimed, want, wakes)
        finally:
            self._shut()
            connection.close()
            logger.info(
                "Group %s wrote %d outcomes in %d rounds",
                self.label,
                self.outcomes_written,
                self.rounds,
            )

    def _wait_for_work(self) -> int | None:
        """Under the lock: how many runs to claim this round (0: none), once
        there is something to do; None when the thread should end."""
        while True:
            if self._inflight and (self._stopping or self._closed):
                self._cond.wait()  # a claim on wake-up ends soon; its leases are held
                continue
            if self._closed:
                return 0 if self._outcomes else None
            want = self._want()
            if self._outcomes or (want and self._due):
                return want
            if self._stopping and self._busy == 0:
                return None
            if (
                self.config.burst
                and len(self._idle) == self.boxes
                and not (self._busy or self._ready)
            ):
                # Burst: the last claim found nothing, every slot is idle
                # and no run is on the loop.
                self._stopping = True
                self._release_idle()
                return None
            if self._ready and not self._stopping:
                waited = time.monotonic() - self._ready[0].claimed
                if waited >= AHEAD_WAIT_SECONDS:
                    return 0  # give back what waited too long (``_round``)
                self._cond.wait(AHEAD_WAIT_SECONDS - waited)
            elif not want:
                self._cond.wait()
            elif not self._cond.wait(self.config.poll_seconds * random.uniform(0.9, 1.1)):  # noqa: S311
                self._due = True  # the poll: a safety net under NOTIFY

    def _want(self) -> int:
        if self._stopping:
            return 0
        ahead = self.ahead if self._run_seconds < AHEAD_BELOW_SECONDS else 0
        # An idle slot may have no room: its last run is still on the loop.
        free = min(len(self._idle), self._room())
        return max(0, min(self.claim_batch, free + ahead - len(self._ready)))

    def _round(self, outcomes: list[Done], want: int) -> list[leases.Lease]:
        """Write the outcomes and claim ``want`` runs; the new leases, held.

        On a database error every outcome not yet written is reported as
        left to lease expiry (the statement may or may not have committed),
        and the error is raised."""
        reported: set[leases.Lease] = set()
        self._give_back_stale()

        def report(lease: leases.Lease, label: Reported) -> None:
            reported.add(lease)
            self._report(lease, label)

        finishes: list[tuple[leases.Lease, Succeeded | Failed]] = []
        try:
            for lease, outcome in outcomes:
                if outcome is None:
                    report(lease, Reported.ERROR)
                elif isinstance(outcome, Succeeded | Failed):
                    finishes.append((lease, outcome))
                else:
                    report(lease, _write_alone(lease, outcome))
            if not finishes and not want:
                return []
            try:
                written, claimed = leases.finish_and_claim(finishes, self._spec(want))
            except DatabaseError as exc:
                if connection_lost(exc) or not finishes:
                    raise
                # One run's finish may be what the statement refused: each
                # is written alone, so it costs no other run its outcome.
                logger.warning(
                    "%s: finishing %d runs together failed (%s); one at a time",
                    self.name,
                    len(finishes),
                    exc,
                )
                for lease, outcome in finishes:
                    report(lease, _write_alone(lease, outcome))
                finishes, written = [], []
                claimed = leases.finish_and_claim([], self._spec(want))[1] if want else []
        except Exception:
            for lease, _outcome in outcomes:
                if lease not in reported:
                    self._report(lease, Reported.ERROR)
            raise
        with self._cond:
            self._held.update(claimed)
        self.rounds += 1
        self.outcomes_written += len(outcomes)
        for (lease, outcome), ok in zip(finishes, written, strict=True):
            report(lease, Reported(outcome.name) if ok else Reported.FENCED)
        return claimed

    def _hand_out(self, claimed: list[leases.Lease], want: int, wakes: int) -> None:
        with self._cond:
            self._claiming = False
            if want:
                if self.config.burst:
                    self._due = bool(claimed)
                else:
                    # A short claim drained what was due, unless a wake-up
                    # landed meanwhile (a run committed after its snapshot).
                    self._due = len(claimed) >= want or self._wakes != wakes
            for lease in claimed:
                if self._idle and self._room() > 0 and not self._stopping:
                    self._idle.popleft().deliver(self._start(lease))
                else:
                    self._ready.append(lease)

    def _give_back_stale(self) -> None:
        """Give back leases claimed ahead that waited too long for a slot."""
        deadline = time.monotonic() - AHEAD_WAIT_SECONDS
        with self._cond:
            stale = []
            while self._ready and self._ready[0].claimed <= deadline:
                stale.append(self._ready.popleft())
        if stale:
            # A slot was busy that long: runs are not short now. No more
            # claiming ahead until short runs bring the average down again
            # (the release's NOTIFY must not make this group claim it back).
            self._run_seconds = max(self._run_seconds, AHEAD_WAIT_SECONDS)
        for lease in stale:
            # Queued at once, NOTIFY sent; never started, so its budget
            # reservation goes back too.
            leases.release(lease, "claimed_ahead", unstarted=True)
            self._report(lease, Reported.GIVEN_BACK)

    def _report(self, lease: leases.Lease, outcome: Reported) -> None:
        """The outcome is written (or left to lease expiry): the lease ends here."""
        with self._cond:
            self._held.discard(lease)
        if lease.started:
            seconds = time.monotonic() - lease.started
            if self._run_seconds == float("inf"):
                self._run_seconds = seconds
            else:
                self._run_seconds += (seconds - self._run_seconds) * 0.2
        self._finished(lease, outcome)

    def _shut(self) -> None:
        """Write what is left and give back every lease still held."""
        with self._cond:
            self._stopping = True
            self._release_idle()
            outcomes, self._outcomes = self._outcomes, []
        if outcomes:
            try:
                self._round(outcomes, 0)
            except DatabaseError as exc:
                logger.warning("%s: database error at shutdown (%s)", self.name, exc)
                connection.close()
        for lease in self.held():
            # Queued at once; the epoch bump fences a handler still running
            # it. One no slot started (claimed ahead, or claimed while the
            # group stopped: no slot starts a lease once _stopping is set)
            # gives its budget reservation back too.
            unstarted = not lease.started
            if retrying(functools.partial(leases.release, lease, "shutdown", unstarted=unstarted)):
                logger.info("Gave back run id=%s epoch=%s", lease.run_id, lease.epoch)
            with self._cond:
                self._held.discard(lease)
        with self._cond:
            self._ready.clear()


def _write_alone(lease: leases.Lease, outcome: Outcome) -> Reported:
    """Write one run's outcome in a transaction of its own; what it became.

    A lost connection is raised (the round's error: nothing more can be
    written now). Any other error is this run's alone: an outcome the
    database or the checks refuse (``_unwritable``: bad input, which no
    attempt would write either) fails the run at once with a failure record
    that says why; another (a lock or statement timeout) leaves this run
    alone to lease expiry. The round's other outcomes are written either way.
    """
    try:
        return leases.label(lease, outcome, leases.write(lease, outcome))
    except Exception as exc:
        if isinstance(exc, DatabaseError) and connection_lost(exc):
            raise
        if not _unwritable(exc):
            logger.warning(
                "Run id=%s: its %s outcome could not be written (%s); left to lease expiry",
                lease.run_id,
                outcome.name,
                exc,
            )
            return Reported.ERROR
        logger.warning(
            "Run id=%s: its %s outcome could not be written (%s); failing the run",
            lease.run_id,
            outcome.name,
            exc,
        )
        failed = Failed(
            failure_record(
                exc,
                classification=PERMANENT,
                attempt=lease.attempt,
                message=f"the run's {outcome.name} outcome could not be written: {exc}",
            )
        )
    try:
        return leases.label(lease, failed, leases.write(lease, failed))
    except Exception as exc:
        if isinstance(exc, DatabaseError) and connection_lost(exc):
            raise
        logger.exception("Run id=%s: its failure could not be written either", lease.run_id)
        return Reported.ERROR


def _unwritable(exc: BaseException) -> bool:
    """The outcome itself is at fault: a value the database refuses (a
    data exception, a constraint) or one the checks refuse first."""
    return isinstance(exc, DataError | IntegrityError | ValueError | TypeError)
