"""Claim-ahead: how many leases a slot group claims beyond its room, as a
strategy the group is given (``strategy``).

``ClaimAhead``: once the group's runs have been short
(``AHEAD_BELOW_SECONDS`` on average), a round may claim up to ``ahead``
leases beyond the idle slots. They wait in the group's ``ready`` for the
next slot to hand an outcome over, so that slot starts at once and the
next round carries several outcomes. They are held like any other lease
(heartbeated, given back at shutdown, fenced if lost: a lease found fenced
is never started), and one that waited ``AHEAD_WAIT_SECONDS`` for a slot is
given back (``wait_left``, ``overdue``), so a run never waits long behind a
busy slot while another worker could run it. Until runs are known to be
short, and while they are long, the group claims for its idle slots only.

``Plain``: the group claims for its room only, never ahead: the
interactive class's groups (a run never waits behind another) and any
group of a worker with ``claim_ahead`` 0. Such a group claims on wake-up
too (``runqueue.worker.wake_claims``).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Protocol

from runqueue import leases

#: Claim ahead only while the group's runs take less than this on average.
AHEAD_BELOW_SECONDS = 0.1
#: A lease claimed ahead that waited this long for a slot is given back.
AHEAD_WAIT_SECONDS = 1.0


class Strategy(Protocol):
    #: Whether the group ever holds leases beyond its room.
    claims_ahead: bool

    def beyond(self) -> int:
        """Leases to hold now beyond the room."""
        ...

    def ran(self, seconds: float) -> None:
        """A run of the group ended after ``seconds``."""
        ...

    def gave_back(self) -> None:
        """Leases held ahead waited too long for a slot and were given back."""
        ...


class Plain:
    """Claim for the room only."""

    claims_ahead = False

    def beyond(self) -> int:
        return 0

    def ran(self, seconds: float) -> None:
        pass

    def gave_back(self) -> None:
        pass


class ClaimAhead:
    """Hold up to ``ahead`` leases beyond the room while runs are short."""

    claims_ahead = True

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        #: Average run time (seconds; unknown until a run ended).
        self.run_seconds = float("inf")

    def beyond(self) -> int:
        return self.ahead if self.run_seconds < AHEAD_BELOW_SECONDS else 0

    def ran(self, seconds: float) -> None:
        if self.run_seconds == float("inf"):
            self.run_seconds = seconds
        else:
            self.run_seconds += (seconds - self.run_seconds) * 0.2

    def gave_back(self) -> None:
        # A slot was busy that long: runs are not short now. No more
        # claiming ahead until short runs bring the average down again
        # (the release's NOTIFY must not make this group claim it back).
        self.run_seconds = max(self.run_seconds, AHEAD_WAIT_SECONDS)


def strategy(ahead: int) -> Strategy:
    """``ClaimAhead`` for a group that may hold ``ahead`` leases beyond its
    room, else ``Plain``."""
    return ClaimAhead(ahead) if ahead > 0 else Plain()


def wait_left(ready: deque[leases.Lease]) -> float:
    """Under the group's lock: seconds until the oldest lease in ``ready``
    has waited ``AHEAD_WAIT_SECONDS`` (0 or less: it has)."""
    return AHEAD_WAIT_SECONDS - (time.monotonic() - ready[0].claimed)


def overdue(ready: deque[leases.Lease]) -> list[leases.Lease]:
    """Under the group's lock: the leases that waited ``AHEAD_WAIT_SECONDS``
    in ``ready`` for a slot, taken out of it (to give back)."""
    deadline = time.monotonic() - AHEAD_WAIT_SECONDS
    stale = []
    while ready and ready[0].claimed <= deadline:
        stale.append(ready.popleft())
    return stale
