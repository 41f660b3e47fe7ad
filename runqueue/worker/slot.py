"""One slot: take a lease from the group, decide how its run ends, hand the
outcome back and take the next lease, until the group says stop. A slot is
a thread (``Slot``), or a coroutine on the process's event loop
(``LoopSlots``, ``--slots async=500:loop``).

A slot thread that takes a run whose handler is ``async def`` hands it to
the event loop (``LoopRuns``) and takes the next lease at once: the run
holds no thread while it awaits, and hands its outcome to the group when it
ends. The group starts no more than its size at once either way.

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

from runqueue import leases, registry, runtime
from runqueue.errors import UnknownKind
from runqueue.leases.outcomes import Outcome
from runqueue.observability import observe
from runqueue.runtime import aio
from runqueue.worker.boxes import Box, Dispatch, Done, LoopBox
from runqueue.worker.group import Group
from runqueue.worker.services import ConnectionCheck

logger = logging.getLogger("runqueue.worker")


class Slot(threading.Thread):
    def __init__(self, name: str, group: Dispatch, loop_runs: LoopRuns | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.group = group
        #: Where this slot's async runs go (None: they run here, the thread waiting).
        self.loop_runs = loop_runs

    def run(self) -> None:
        check = ConnectionCheck()
        box = Box()
        done: Done | None = None
        try:
            while (lease := self.group.exchange(box, done)) is not None:
                if self.loop_runs is not None and _async_handler(lease):
                    self.loop_runs.start(lease)  # its outcome goes to the group from there
                    done = None
                    continue
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


def _async_handler(lease: leases.Lease) -> bool:
    try:
        return aio.is_async(registry.lookup(lease.run.kind, lease.run.handler_version))
    except UnknownKind:
        return False  # the runtime gives the run back, in the slot


async def decide_on_loop(lease: leases.Lease) -> Outcome | None:
    """``runtime.decide_async`` for a slot on the loop, or a run a slot
    thread handed over: None when the runtime failed or lost the database
    (the lease is left to expire)."""
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


class LoopRuns:
    """The async runs a thread slot group's slots handed to the event loop.

    Each runs as a task on the loop and hands its outcome to the group
    (``Group.hand_over``) when it ends. Quacks like a slot thread for the
    pool (``start``, ``is_alive``, ``join``): the pool's shutdown waits for
    these runs as it waits for its threads."""

    def __init__(self, name: str, group: Group) -> None:
        self.name = name
        self.group = group
        self._lock = threading.Lock()
        self._running: set[concurrent.futures.Future[None]] = set()

    def start(self, lease: leases.Lease | None = None) -> None:
        """Run ``lease`` on the loop (the pool's ``start()``: nothing yet)."""
        if lease is None:
            return
        future = aio.run(self._run(lease))
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._ended)

    def _ended(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._running.discard(future)

    async def _run(self, lease: leases.Lease) -> None:
        outcome: Outcome | None = None
        try:
            outcome = await decide_on_loop(lease)
        finally:
            self.group.hand_over((lease, outcome))

    def is_alive(self) -> bool:
        with self._lock:
            return bool(self._running)

    def join(self, timeout: float | None = None) -> None:
        with self._lock:
            running = list(self._running)
        concurrent.futures.wait(running, timeout)


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
            done = (lease, await decide_on_loop(lease))
