"""Claim-on-wake: a slot group that never claims ahead (the interactive
class's) claims for its idle slots in the thread that learns runs are due
(the LISTEN thread, ``Group.wake``) and hands each lease straight to its
slot.

A wake-up then crosses one thread boundary (listener to slot) instead of
two, and each boundary can cost a GIL switch interval (5 ms) while another
thread runs Python. Only claims move here: outcomes are still written by
the group thread alone. The idle slots a claim is for are taken out of the
idle list while it runs, and their room reserved, so the group thread and
the waking thread never claim for the same slot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError, connection

from runqueue import leases
from runqueue.worker.boxes import Box
from runqueue.worker.group_state import GroupState
from runqueue.worker.services import ConnectionCheck

logger = logging.getLogger("runqueue.worker")


class ClaimOnWake:
    """A group's claims made by the threads that wake it."""

    def __init__(
        self,
        state: GroupState,
        spec: Callable[[int], leases.ClaimSpec],
        *,
        batch: int,
        name: str,
    ) -> None:
        self.state = state
        self.spec = spec
        self.batch = batch
        #: The group thread's name, for the log.
        self.name = name
        self._check = ConnectionCheck()
        #: Claims made by a waking thread.
        self.claims = 0

    def take(self) -> list[Box]:
        """Under the lock: the idle slots to claim for now, taken out of the
        idle list with their room reserved; none while the group thread
        claims or the group stops."""
        state = self.state
        boxes: list[Box] = []
        if state.claiming or state.stopping:
            return boxes
        room = min(self.batch, state.room())
        while state.idle and len(boxes) < room:
            boxes.append(state.idle.popleft())
        if boxes:
            state.inflight += 1
            state.reserved += len(boxes)
        return boxes

    def claim_for(self, boxes: list[Box], wakes: int) -> None:
        """Claim for ``boxes`` (``take``) and hand each lease to its slot;
        the boxes left over go back. On an error the group thread claims
        instead, with its backoff."""
        self._check()
        reserved = len(boxes)
        try:
            _written, claimed = leases.finish_and_claim([], self.spec(len(boxes)))
        except Exception as exc:
            if isinstance(exc, DatabaseError):
                logger.warning("%s: claim on wake-up failed (%s)", self.name, exc)
                connection.close()
            else:
                logger.exception("%s: claim on wake-up failed", self.name)
            claimed, failed = [], True
        else:
            failed = False
        state = self.state
        with state.cond:
            state.inflight -= 1
            state.reserved -= reserved
            state.held.update(claimed)
            self.claims += 1
            for lease in claimed:
                box = boxes.pop(0)
                if state.stopping:
                    # Held, never started: the group thread gives it back.
                    state.ready.append(lease)
                    box.deliver(None)
                else:
                    box.deliver(state.start(lease))
            # Short: the queue is drained, unless a wake-up landed meanwhile.
            state.due = failed or not boxes or state.wakes != wakes
            if state.stopping:
                for box in boxes:
                    box.deliver(None)
            else:
                state.idle.extendleft(reversed(boxes))
            if boxes or state.stopping:
                # Idle slots again (a short or failed claim: every box is
                # left), or a stop waiting for this claim (close sets
                # stopping too). Not after a claim that filled every slot:
                # the group thread would have nothing to do, and waking it
                # only makes the slot thread wait for the GIL behind it.
                state.cond.notify()
