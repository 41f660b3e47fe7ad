"""What a slot group's lock guards, in one object: the outcomes handed over,
the idle slots, the leases held (and those claimed ahead of a slot), the
room left, and the flags the group thread, the slots and a waking thread
coordinate by. Every method here runs under ``cond``, the group's lock;
the threads that share it are the group's (``runqueue.worker.group``)."""

from __future__ import annotations

import threading
import time
from collections import deque

from runqueue import leases
from runqueue.worker.boxes import Box, Done


class GroupState:
    """One slot group's shared state; read and written under ``cond``."""

    def __init__(self, size: int) -> None:
        self.cond = threading.Condition()
        #: Runs at once, at most.
        self.size = size
        #: Handed over since the last round: the group thread's to write.
        self.outcomes: list[Done] = []
        self.idle: deque[Box] = deque()
        #: Claimed and not started: ahead of a slot, or while the group stops.
        self.ready: deque[leases.Lease] = deque()
        self.held: set[leases.Lease] = set()
        #: Runs started and not handed back (on a slot, or on the loop).
        self.busy = 0
        #: Idle slots a claim on wake-up took: room kept for them.
        self.reserved = 0
        #: Runs may be due: the last claim was full, or a NOTIFY or poll said so.
        self.due = True
        #: Bumped by every wake-up, so one that lands during a claim is kept.
        self.wakes = 0
        #: The group thread is claiming: a wake-up leaves the claim to it.
        self.claiming = False
        #: Claims running in a waking thread: the group thread outlives them.
        self.inflight = 0
        self.stopping = False
        self.closed = False

    def room(self) -> int:
        """Runs the group may start now (``size`` at once)."""
        return self.size - self.busy - self.reserved

    def start(self, lease: leases.Lease) -> leases.Lease:
        self.busy += 1
        lease.started = time.monotonic()
        return lease

    def next_ready(self) -> leases.Lease | None:
        """A lease claimed ahead, started, if there is room."""
        while self.ready and self.room() > 0:
            lease = self.ready.popleft()
            if lease.fenced or lease.cancelled.is_set():
                # Lost or cancelled while held ahead: never started.
                self.held.discard(lease)
                continue
            return self.start(lease)
        return None

    def returned(self, done: Done) -> None:
        """A run ended; its outcome is the group thread's to write."""
        done[0].returned = True
        self.busy -= 1
        self.outcomes.append(done)
        self.cond.notify()

    def take_outcomes(self) -> list[Done]:
        outcomes, self.outcomes = self.outcomes, []
        return outcomes

    def place(self, claimed: list[leases.Lease]) -> None:
        """Each new lease to an idle slot while there is room, the rest to
        ``ready`` (held, to start as soon as a slot asks)."""
        for lease in claimed:
            if self.idle and self.room() > 0 and not self.stopping:
                self.idle.popleft().deliver(self.start(lease))
            else:
                self.ready.append(lease)

    def release_idle(self) -> None:
        """Every idle slot stops."""
        while self.idle:
            self.idle.popleft().deliver(None)
