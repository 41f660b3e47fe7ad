"""One slot: take a lease from the group, decide how its run ends, hand the
outcome back and take the next lease, until the group says stop. A slot is
a thread (``Slot``), or a coroutine on the process's event loop
(``LoopSlots``, ``--slots async=500:loop``).

A slot writes no outcome and ends no lease: its group does both
(``runqueue.worker.group``). What the handler writes while it runs
(checkpoints, tool records, events) goes through the fence on the slot's
own connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading

from django.db import DatabaseError, connection

from runqueue import aio, leases, runtime
from runqueue.observability import observe
from runqueue.outcomes import Outcome
from runqueue.worker.group import Box, Dispatch, Done, Group, LoopBox
from runqueue.worker.services import ConnectionCheck

logger = logging.getLogger("runqueue.worker")


class Slot(threading.Thread):
    def __init__(self, name: str, group: Dispatch) -> None:
        super().__init__(name=name, daemon=True)
        self.group = group

    def run(self) -> None:
        check = ConnectionCheck()
        box = Box()
        done: Done | None = None
        try:
            while (lease := self.group.exchange(box, done)) is not None:
                check()
                done = (lease, self._decide(lease))
        finally:
            connection.close()

    def _decide(self, lease: leases.Lease) -> Outcome | None:
        run = lease.run
        observe.claimed(lease)  # log line, metrics
        try:
            with observe.run_span(lease):  # OpenTelemetry; ended by observe.finished
                return runtime.decide(lease)
        except DatabaseError as exc:
            # Lost the database mid-run: the lease expires and the sweeper
            # requeues the run; nothing here can be trusted to have committed.
            logger.warning(
                "Run id=%s: database error (%s); leaving it to the sweeper", run.id, exc
            )
            connection.close()
        except Exception:
            logger.exception("Run id=%s: the runtime failed", run.id)
        return None


class LoopSlots:
    """``count`` slots of one group as coroutines on the process's loop.

    Each takes a lease (``Group.exchange_async``), awaits
    ``runtime.decide_async`` and hands the outcome back, exactly as a slot
    thread does: the group thread still writes every outcome. Quacks like
    the slot threads for the pool (``start``, ``is_alive``, ``join``).
    """

    def __init__(self, name: str, group: Group, count: int) -> None:
        self.name = name
        self.group = group
        self.count = count
        self._done: concurrent.futures.Future[None] | None = None

    def start(self) -> None:
        self._done = aio.run(self._all())

    def is_alive(self) -> bool:
        return self._done is not None and not self._done.done()

    def join(self, timeout: float | None = None) -> None:
        if self._done is not None:
            concurrent.futures.wait([self._done], timeout)

    async def _all(self) -> None:
        await asyncio.gather(*(self._slot() for _ in range(self.count)))

    async def _slot(self) -> None:
        box = LoopBox(asyncio.get_running_loop())
        done: Done | None = None
        while (lease := await self.group.exchange_async(box, done)) is not None:
            done = (lease, await self._decide(lease))

    async def _decide(self, lease: leases.Lease) -> Outcome | None:
        observe.claimed(lease)
        try:
            with observe.run_span(lease):
                return await runtime.decide_async(lease)
        except DatabaseError as exc:
            logger.warning(
                "Run id=%s: database error (%s); leaving it to the sweeper", lease.run_id, exc
            )
        except Exception:
            logger.exception("Run id=%s: the runtime failed", lease.run_id)
        return None
