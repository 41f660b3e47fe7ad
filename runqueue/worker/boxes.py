"""The exchange between a slot and its group, the slot's side: its mailbox
(``Box``, or ``LoopBox`` for a slot on the event loop), what it hands over
when a run ends (``Done``) and what it needs of its group (``Dispatch``).
Apart from the group (``runqueue.worker.group``) so that a slot, the group
state and the claims on wake-up name them without naming the group."""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol

from runqueue import leases
from runqueue.leases.outcomes import Outcome

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
