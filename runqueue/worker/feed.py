"""Batched claims for one slot group: one claim statement at a time, for as
many runs as the group has idle slots, handed to those slots.

A slot that needs work takes a run another slot claimed for it, or claims
itself, for every idle slot of its group (at most ``max_batch``). A run is
never claimed for a busy slot, so batching adds no wait: what is claimed
starts at once, and a run a busy worker cannot start stays queued for
another worker. Leases are held by the pool from the claim on, so the
heartbeat renews them and a shutdown gives back any not yet started.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Protocol

from runqueue import leases
from runqueue.models import PriorityClass


class Holder(Protocol):
    """What a feed needs of its pool."""

    def hold(self, lease: leases.Lease) -> None: ...


class Empty(Enum):
    """Why ``Feed.take`` returned no lease."""

    #: This slot claimed and nothing was due.
    NOTHING_DUE = "nothing_due"
    #: Another slot of the group is claiming; it wakes the group when done.
    CLAIMING = "claiming"


class Feed:
    def __init__(
        self,
        pool: Holder,
        classes: tuple[PriorityClass, ...],
        size: int,
        *,
        lease_seconds: float,
        max_batch: int,
        claim: Callable[..., list[leases.Lease]] = leases.claim,
    ) -> None:
        self.pool = pool
        self.classes = classes
        self.size = size
        self.lease_seconds = lease_seconds
        self.max_batch = max(1, max_batch)
        self._claim = claim
        self._lock = threading.Lock()
        self._ready: deque[leases.Lease] = deque()
        self._busy = 0
        self._claiming = False
        #: A slot asked while a claim was running: wake the group after it.
        self._asked = False
        self._wakes: list[threading.Event] = []

    def join(self, wake: threading.Event) -> None:
        """Register a slot's wake-up event; it is set when the group claimed."""
        self._wakes.append(wake)

    def take(self, owner: str, me: threading.Event | None = None) -> leases.Lease | Empty:
        """The next lease for a slot that has just become idle, or why none.

        ``me`` is the asking slot's wake-up event: a claim never wakes the
        slot that made it.
        """
        with self._lock:
            if self._ready:
                self._busy += 1
                return self._ready.popleft()
            if self._claiming:
                self._asked = True
                return Empty.CLAIMING
            self._claiming, self._asked = True, False
            limit = min(self.max_batch, self.size - self._busy)
        claimed: list[leases.Lease] = []
        try:
            claimed = self._claim(
                owner, self.classes, limit=max(limit, 1), lease_seconds=self.lease_seconds
            )
        finally:
            with self._lock:
                self._claiming = False
                asked, self._asked = self._asked, False
            # On an error too: the slots that waited for this claim try again.
            shared = self._share(claimed, asked, me)
        return shared

    def _share(
        self, claimed: Sequence[leases.Lease], asked: bool, me: threading.Event | None
    ) -> leases.Lease | Empty:
        for lease in claimed:
            self.pool.hold(lease)
        with self._lock:
            if claimed:
                self._busy += 1
                self._ready.extend(claimed[1:])
        # Wake the group only when there is something for it: runs claimed
        # for its idle slots, or a slot that asked during the claim (a run
        # committed meanwhile may be missing from this claim's snapshot).
        # Waking it after an empty claim would have the slots wake each
        # other for ever.
        if len(claimed) > 1 or asked:
            for wake in self._wakes:
                if wake is not me:
                    wake.set()
        return claimed[0] if claimed else Empty.NOTHING_DUE

    def done(self) -> None:
        """A slot finished its run and is idle again."""
        with self._lock:
            self._busy -= 1

    def ready(self) -> list[leases.Lease]:
        """Claimed leases no slot has taken yet."""
        with self._lock:
            return list(self._ready)
