"""One slot group: its claims, its slots' outcomes and its leases, written
by one thread.

A slot decides how its run ended (``runtime.decide``), hands the outcome to
its group and waits for its next lease (the slot's side of that exchange:
``runqueue.worker.boxes``). The group thread is the only writer of those
outcomes and the only place the group's leases end: each round it writes
every outcome handed over since the last one and claims the next runs for
the idle slots in the same statement (``runqueue.worker.rounds``).

A group holds leases beyond its idle slots only as its claim-ahead
strategy says (``runqueue.worker.claim_ahead``: while runs are short, never
for the interactive class); a group that never does claims on wake-up in
the waking thread (``runqueue.worker.wake_claims``). What the group's lock
guards is one object, ``GroupState`` (``runqueue.worker.group_state``).

A run is never claimed for a slot that is not idle or about to be: what is
claimed starts at once or as soon as a run of the group ends.

Room: the group runs at most ``size`` runs at once. A slot thread that
hands an async run to the event loop (``runqueue.worker.slot.LoopRuns``) is
idle again while the run still counts: the run hands its outcome over
itself (``hand_over``), and every claim is for the room left, not for the
idle slots.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, connection

from runqueue import leases
from runqueue.db import connection_lost
from runqueue.leases.outcomes import Reported
from runqueue.models import PriorityClass
from runqueue.worker import claim_ahead, rounds
from runqueue.worker.boxes import Box, Done, LoopBox
from runqueue.worker.group_state import GroupState
from runqueue.worker.services import ConnectionCheck, reconnect_delay, retrying
from runqueue.worker.wake_claims import ClaimOnWake

logger = logging.getLogger("runqueue.worker")


#: ``Group._exchange``: no lease ready, the box waits for one.
class _Wait:
    pass


_WAIT = _Wait()


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
        self.state = GroupState(config.size)
        #: How many leases to hold beyond the room (``runqueue.worker.claim_ahead``).
        self.ahead = claim_ahead.strategy(config.claims_ahead)
        #: Wake-ups claim for idle slots in the waking thread (``wake``): a
        #: group that never claims ahead, unless it drains the queue once.
        self.on_wake = (
            ClaimOnWake(self.state, self._spec, batch=self.claim_batch, name=self.name)
            if not (self.ahead.claims_ahead or config.burst)
            else None
        )
        self._finished = finished
        #: Statements written, and outcomes in them (logged at shutdown).
        self.rounds = 0
        self.outcomes_written = 0

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
        state = self.state
        with state.cond:
            if done is not None:
                state.returned(done)
            if state.stopping:
                return None
            if (lease := state.next_ready()) is not None:
                return lease
            box.arm()
            state.idle.append(box)
            state.cond.notify()
        return _WAIT

    def hand_over(self, done: Done) -> None:
        """How a run a slot thread handed to the event loop ended (the
        thread took other leases meanwhile): written like any outcome."""
        state = self.state
        with state.cond:
            state.returned(done)
            # Room again: a lease claimed ahead starts on an idle slot.
            while state.idle and not state.stopping:
                lease = state.next_ready()
                if lease is None:
                    break
                state.idle.popleft().deliver(lease)

    # --- the pool ------------------------------------------------------------------

    def wake(self) -> None:
        """Runs of the group's classes may be due (a NOTIFY).

        A group that never claims ahead claims for its idle slots here, in
        the caller's thread, unless the group thread is claiming already."""
        state, on_wake = self.state, self.on_wake
        with state.cond:
            state.due = True
            state.wakes += 1
            boxes = on_wake.take() if on_wake is not None else []
            if on_wake is None or not boxes:
                state.cond.notify()
                return
            wakes = state.wakes
        on_wake.claim_for(boxes, wakes)

    def held(self) -> list[leases.Lease]:
        with self.state.cond:
            return list(self.state.held)

    def stop(self) -> None:
        """Claim no more; idle slots stop, busy ones hand their outcome over."""
        state = self.state
        with state.cond:
            state.stopping = True
            state.release_idle()
            state.cond.notify()

    def close(self) -> None:
        """After the grace period: write what was handed over, give back every
        lease still held (the release's epoch bump fences a handler still
        running), and end the thread."""
        state = self.state
        with state.cond:
            state.stopping = state.closed = True
            state.release_idle()
            state.cond.notify()

    # --- the thread ---------------------------------------------------------------------

    def warm(self) -> None:
        """Pay the calling thread's connection's first claim that moves a
        run now, not on a user's run (``leases.warm_connection``): the group
        thread's, and the listener's where wake-ups claim. A failure is
        logged; the claims go on without it."""
        try:
            leases.warm_connection(self._spec(1))
        except DatabaseError as exc:
            logger.debug("%s: warming the connection failed (%s)", self.name, exc)
        except Exception:
            logger.exception("%s: warming the connection failed", self.name)

    def run(self) -> None:
        state = self.state
        check = ConnectionCheck()
        delay = 0.5
        self.warm()
        try:
            while True:
                with state.cond:
                    want = self._wait_for_work()
                    if want is None:
                        break
                    outcomes = state.take_outcomes()
                    wakes = state.wakes
                    state.claiming = want > 0
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
                    with state.cond:
                        state.claiming = False
                        state.cond.wait_for(lambda: state.stopping, wait)
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
        state = self.state
        while True:
            if state.inflight and (state.stopping or state.closed):
                state.cond.wait()  # a claim on wake-up ends soon; its leases are held
                continue
            if state.closed:
                return 0 if state.outcomes else None
            want = self._want()
            if state.outcomes or (want and state.due):
                return want
            if state.stopping and state.busy == 0:
                return None
            if (
                self.config.burst
                and len(state.idle) == self.boxes
                and not (state.busy or state.ready)
            ):
                # Burst: the last claim found nothing, every slot is idle
                # and no run is on the loop.
                state.stopping = True
                state.release_idle()
                return None
            if state.ready and not state.stopping:
                left = claim_ahead.wait_left(state.ready)
                if left <= 0:
                    return 0  # give back what waited too long (``_round``)
                state.cond.wait(left)
            elif not want:
                state.cond.wait()
            elif not state.cond.wait(self.config.poll_seconds * random.uniform(0.9, 1.1)):  # noqa: S311
                state.due = True  # the poll: a safety net under NOTIFY

    def _want(self) -> int:
        state = self.state
        if state.stopping:
            return 0
        # An idle slot may have no room: its last run is still on the loop.
        free = min(len(state.idle), state.room())
        return max(0, min(self.claim_batch, free + self.ahead.beyond() - len(state.ready)))

    def _round(self, outcomes: list[Done], want: int) -> list[leases.Lease]:
        """Give back what waited too long ahead, write the outcomes and claim
        ``want`` runs (``rounds.write``); the new leases, held."""
        self._give_back_stale()
        written = rounds.write(outcomes, want, self._spec, self._report, self.name)
        if written is None:
            return []
        with self.state.cond:
            self.state.held.update(written.claimed)
        self.rounds += 1
        self.outcomes_written += len(outcomes)
        for lease, label in written.finished:
            self._report(lease, label)
        return written.claimed

    def _hand_out(self, claimed: list[leases.Lease], want: int, wakes: int) -> None:
        state = self.state
        with state.cond:
            state.claiming = False
            if want:
                if self.config.burst:
                    state.due = bool(claimed)
                else:
                    # A short claim drained what was due, unless a wake-up
                    # landed meanwhile (a run committed after its snapshot).
                    state.due = len(claimed) >= want or state.wakes != wakes
            state.place(claimed)

    def _give_back_stale(self) -> None:
        """Give back leases claimed ahead that waited too long for a slot."""
        with self.state.cond:
            stale = claim_ahead.overdue(self.state.ready)
        if stale:
            self.ahead.gave_back()
        for lease in stale:
            # Queued at once, NOTIFY sent; never started, so its budget
            # reservation goes back too.
            leases.release(lease, "claimed_ahead", unstarted=True)
            self._report(lease, Reported.GIVEN_BACK)

    def _report(self, lease: leases.Lease, outcome: Reported) -> None:
        """The outcome is written (or left to lease expiry): the lease ends here."""
        with self.state.cond:
            self.state.held.discard(lease)
        if lease.started:
            self.ahead.ran(time.monotonic() - lease.started)
        self._finished(lease, outcome)

    def _shut(self) -> None:
        """Write what is left and give back every lease still held."""
        state = self.state
        with state.cond:
            state.stopping = True
            state.release_idle()
            outcomes = state.take_outcomes()
        if outcomes:
            try:
                self._round(outcomes, 0)
            except DatabaseError as exc:
                logger.warning("%s: database error at shutdown (%s)", self.name, exc)
                connection.close()
        for lease in self.held():
            # Queued at once; the epoch bump fences a handler still running
            # it. One no slot started (claimed ahead, or claimed while the
            # group stopped: no slot starts a lease once stopping is set)
            # gives its budget reservation back too.
            unstarted = not lease.started
            if retrying(functools.partial(leases.release, lease, "shutdown", unstarted=unstarted)):
                logger.info("Gave back run id=%s epoch=%s", lease.run_id, lease.epoch)
            with state.cond:
                state.held.discard(lease)
        with state.cond:
            state.ready.clear()
