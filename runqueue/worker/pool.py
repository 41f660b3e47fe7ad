"""The pool: slot groups with reserved capacity, wake-ups, heartbeats, the
sweeper and graceful shutdown. One per ``runworker`` process."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence

from django.db import DatabaseError, connection
from django.db.models.functions import Now

from runqueue import leases, registry
from runqueue.capacity import budgets, concurrency
from runqueue.db import connection_lost
from runqueue.errors import MAX_DURATION
from runqueue.events import wakeups
from runqueue.leases.outcomes import Reported
from runqueue.models import Worker
from runqueue.observability import observe
from runqueue.runtime import aio
from runqueue.worker import background
from runqueue.worker.config import (
    CLAIM_AHEAD,
    CLAIM_BATCH,
    PoolConfig,
    default_worker_id,
)
from runqueue.worker.deadlines import Deadlines
from runqueue.worker.group import Group, GroupConfig
from runqueue.worker.listener import Listener
from runqueue.worker.services import Periodic, reconnect_delay, retrying
from runqueue.worker.slot import LoopRuns, LoopSlots, Slot
from runqueue.worker.spec import Lane, SlotSpec, shape

__all__ = ["CLAIM_AHEAD", "CLAIM_BATCH", "Pool", "PoolConfig", "SlotSpec", "default_worker_id"]

logger = logging.getLogger("runqueue.worker")

#: At shutdown, running handlers are told to stop once this share of the
#: grace period has passed (the rest is theirs to return).
CANCEL_AT_GRACE = 0.5
#: A handler told to stop that still holds its slot this long is logged.
IGNORED_AFTER_SECONDS = 2.0


def _join(threads: Sequence[threading.Thread | LoopSlots | LoopRuns], deadline: float) -> None:
    """Wait for ``threads`` until ``deadline``, waking every 0.2 s: a signal
    the kernel gives another thread runs its Python handler (a second
    SIGTERM: exit now) only when the main thread wakes up."""
    for thread in threads:
        while thread.is_alive() and (left := deadline - time.monotonic()) > 0:
            thread.join(min(left, 0.2))


def settle_heap() -> None:
    """What a worker process loaded before it claims (Django, the settings,
    the handlers' modules: ~80,000 objects) lives as long as it does:
    collected once, then frozen out of the collector's walks. A full
    collection over it took 13-14 ms, paid by the pickup it landed on
    (``runworker`` calls this; a process that starts a Pool of its own may)."""
    gc.collect()
    gc.freeze()


class Pool:
    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        #: Set on the first SIGTERM/SIGINT: stop claiming, let runs finish.
        self.stopping = threading.Event()
        #: Set once every run is finished or given back: background loops end.
        self.stopped = threading.Event()
        self._signals = 0
        #: Runs whose handler was logged as ignoring its cancellation.
        self._reported_ignoring: set[uuid.UUID] = set()
        #: One slot group per claim lane of each spec (``SlotSpec.lanes``).
        self.groups: list[Group] = []
        self.slots: list[Slot | LoopSlots | LoopRuns] = []
        for spec in config.slots:
            for lane in spec.lanes(config.claim_lanes):
                self._add_lane(spec, lane)
        #: The background services (runqueue.worker.background): renewing
        #: every held lease, until the last lease is given back ...
        self.heartbeat_services = background.periodic(self, "heartbeat")
        #: ... and the maintenance, each on its own clock, until the pool
        #: stops claiming.
        self.maintenance_services = background.periodic(self, "maintenance")
        #: The services started, by name: their threads or servers.
        self.running: dict[str, object] = {}

    def _add_lane(self, spec: SlotSpec, lane: Lane) -> None:
        """A lane's group and its slots: threads that hand their async runs
        to the loop (LoopRuns), or coroutines on the loop (``:loop``)."""
        config = self.config
        group = Group(
            GroupConfig(
                label=lane.label,
                classes=spec.classes,
                size=lane.count,
                slots=lane.slots,
                owner=f"{config.worker_id}/{spec.label}",
                lease_seconds=config.lease_seconds,
                claim_batch=config.claim_batch,
                ahead=config.claim_ahead,
                poll_seconds=config.poll_seconds,
                burst=config.burst,
            ),
            finished=self.finished,
        )
        self.groups.append(group)
        if spec.loop:
            self.slots.append(LoopSlots(f"{lane.label}-loop", group, lane.count))
            return
        loop_runs = LoopRuns(f"{lane.label}-on-loop", group)
        self.slots.extend(
            Slot(f"{spec.label}-{lane.first + i}", group, loop_runs) for i in range(lane.slots)
        )
        self.slots.append(loop_runs)

    # --- leases held by this process ---------------------------------------------

    def finished(self, lease: leases.Lease, outcome: Reported) -> None:
        """A group wrote a run's outcome (or left it to lease expiry)."""
        seconds = time.monotonic() - lease.started if lease.started else None
        observe.finished(lease, outcome, seconds)

    def held(self) -> list[leases.Lease]:
        """Every lease the groups hold: running, or claimed ahead."""
        return [lease for group in self.groups for lease in group.held()]

    def wake(self, payload: str) -> None:
        """Act on a NOTIFY's wake-up (runqueue.events.wakeups): wake the groups that
        may claim the class it names (all for none), read the limits or
        budgets again and claim, or stop the handler of a run it cancels."""
        wakeup = wakeups.parse(payload)
        if isinstance(wakeup, wakeups.Cancelled):
            self.cancel_run(wakeup.run_id, wakeup.epoch)
            return
        if isinstance(wakeup, wakeups.Paused):
            for lease in self.held():
                if lease.run_id == wakeup.run_id:
                    lease.pause()
            return
        if isinstance(wakeup, wakeups.Changed):
            if wakeup.setting == "concurrency":
                concurrency.invalidate()
            else:
                budgets.invalidate()
            wakeup = wakeups.Due()  # claim again: runs may be claimable now
        if not isinstance(wakeup, wakeups.Due):
            return  # a probe, or not runqueue's
        woken = wakeup.priority_class
        for group in self.groups:
            if woken is None or woken.slug in group.class_names:
                group.wake()

    def cancel_run(self, run_id: uuid.UUID, epoch: int) -> None:
        """The run is at ``epoch`` now (a cancel): a lease of an older epoch
        tells its handler to stop. Writes nothing: the fence still judges."""
        for lease in self.held():
            if lease.run_id == run_id and lease.epoch < epoch:
                lease.cancel("cancelled")

    def cancel_all(self, reason: str) -> None:
        """Tell every running handler to stop (the worker is stopping)."""
        for lease in self.held():
            if lease.started and not lease.returned:
                lease.cancel(reason)

    def ignoring_cancellation(self, older_than: float = 0.0) -> list[leases.Lease]:
        """Leases whose handler was told to stop ``older_than`` seconds ago or
        more and still holds its slot."""
        now = time.monotonic()
        return [
            lease
            for lease in self.held()
            if lease.started
            and not lease.returned
            and lease.cancelled_at
            and now - lease.cancelled_at >= older_than
        ]

    # --- background ticks -------------------------------------------------------------

    def renew_leases(self) -> None:
        """Renew every held lease in one statement; report handlers that
        ignore a cancellation."""
        # A lease its max_duration cancelled is not renewed: a handler that
        # ignores the cancel is fenced by the lease's expiry (the sweeper).
        held = [lease for lease in self.held() if lease.cancel_reason != MAX_DURATION]
        for lease in leases.heartbeat_many(held):
            logger.warning("Lost the lease of run id=%s epoch=%s", lease.run_id, lease.epoch)
        for lease in self.ignoring_cancellation(IGNORED_AFTER_SECONDS):
            if lease.run_id not in self._reported_ignoring:
                self._reported_ignoring.add(lease.run_id)
                logger.warning(
                    "Run id=%s: its handler was told to stop (%s) %.1fs ago and still "
                    "holds its slot",
                    lease.run_id,
                    lease.cancel_reason,
                    time.monotonic() - lease.cancelled_at,
                    extra={"run_id": lease.run_id, "reason": lease.cancel_reason},
                )

    def cancelled_slots(self) -> list[dict[str, str | float]]:
        """The Worker row's ``cancelled_slots``: slots held by a handler told to stop."""
        now = time.monotonic()
        return [
            {
                "run_id": str(lease.run_id),
                "group": lease.owner.rpartition("/")[2],
                "reason": lease.cancel_reason,
                "held_seconds": round(now - lease.cancelled_at, 1),
            }
            for lease in self.ignoring_cancellation()
        ]

    def report_seen(self) -> None:
        """The worker row's ``last_seen_at`` (the admin tells live workers by
        it) and the slots held by cancelled runs."""
        Worker.objects.filter(id=self.config.worker_id).update(
            last_seen_at=Now(), cancelled_slots=self.cancelled_slots()
        )

    # --- life cycle -----------------------------------------------------------------------

    def _register(self) -> None:
        """The worker row, tried again while the database cannot be reached:
        a worker that starts during an outage or a failover waits for the
        server (or the promoted standby), as its threads do, instead of
        exiting with a lost connection."""
        while True:
            try:
                Worker.objects.update_or_create(
                    id=self.config.worker_id,
                    defaults={
                        "hostname": socket.gethostname(),
                        "pid": os.getpid(),
                        "slots": shape(self.config.slots),
                        # What its claims ask for: the dashboard's "which
                        # workers serve each kind and version".
                        "kinds": registry.served().row(),
                        "started_at": Now(),
                        "last_seen_at": Now(),
                        "stopped_at": None,
                    },
                )
                return
            except DatabaseError as exc:
                if not connection_lost(exc):
                    raise
                logger.warning("Registering worker: connection lost (%s); retrying", exc)
                connection.close()
                if self.stopping.wait(reconnect_delay()):
                    raise

    @property
    def listener(self) -> Listener:
        listener = self.running["listener"]
        assert isinstance(listener, Listener)
        return listener

    @property
    def deadlines(self) -> Deadlines:
        deadlines = self.running["deadlines"]
        assert isinstance(deadlines, Deadlines)
        return deadlines

    def warm_wake_claims(self) -> None:
        """In the listener's thread: warm its connection for the groups that
        claim on wake-ups there (``Group.warm``)."""
        for group in self.groups:
            if group.on_wake is not None:
                group.warm()
                return  # one thread, one connection

    def serve(self) -> None:
        """Start the servers the config asks for (the metrics port); raise
        what binding raises. Called again, it starts nothing twice."""
        for service in background.SERVICES:
            if (
                service.runs_on == "server"
                and service.start is not None
                and service.name not in self.running
                and service.enabled(self.config)
            ):
                self.running[service.name] = service.start(self)

    def _start_services(self) -> None:
        """After the slot groups: the services that run until the pool stops
        claiming, in their declared order; in burst mode, the one-off ticks."""
        for service in background.SERVICES:
            if self.config.burst and service.burst == "once" and service.tick is not None:
                service.tick(self)()
            if not service.enabled(self.config) or service.name in self.running:
                continue
            if service.runs_on == "thread" and service.start is not None:
                self.running[service.name] = service.start(self)
            elif service.runs_on == "maintenance" and "maintenance" not in self.running:
                self.running["maintenance"] = maintenance = Periodic(
                    "runqueue-maintenance", self.maintenance_services, self.stopping
                )
                maintenance.start()

    def start(self) -> None:
        self.serve()
        self._register()
        self.heartbeat = Periodic("runqueue-heartbeat", self.heartbeat_services, self.stopped)
        self.heartbeat.start()
        for group in self.groups:
            group.start()
        self._start_services()
        for slot in self.slots:
            slot.start()
        for spec in self.config.slots:
            if spec.slots < spec.count:
                logger.info(
                    "Slots %s: %d runs at once on %d threads: at most %d sync handlers at once "
                    "(async ones hold no thread)",
                    spec.label,
                    spec.count,
                    spec.slots,
                    spec.slots,
                )
        logger.info(
            "Worker %s started: slots %s, lease %ss, heartbeat %ss%s",
            self.config.worker_id,
            shape(self.config.slots),
            self.config.lease_seconds,
            self.config.heartbeat_seconds,
            ", burst" if self.config.burst else "",
        )

    def stop(self) -> None:
        """Stop claiming; in-flight runs get the grace period."""
        self.stopping.set()
        for group in self.groups:
            group.stop()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: object) -> None:
            self._signals += 1
            if self._signals > 1:
                logger.warning("Second signal: exiting now; held leases will expire")
                os._exit(1)
            logger.info("Signal %s: stopping (grace %ss)", signum, self.config.grace_seconds)
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(self) -> int:
        """Run until stopped (or, with burst, until nothing is due); exit code."""
        self.start()
        if self.config.burst:
            while any(slot.is_alive() for slot in self.slots) and not self.stopping.is_set():
                for slot in self.slots:
                    slot.join(0.2)
        else:
            # With a timeout: a signal the kernel gives another thread runs its
            # Python handler only when the main thread wakes up.
            while not self.stopping.wait(1.0):
                pass
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        self.stop()
        now = time.monotonic()
        deadline = now + self.config.grace_seconds
        # Handlers get part of the grace to finish; then they are told to
        # stop (ctx.cancelled, RunCancelled, CancelledError), and a handler
        # that stops is given back at once, its attempt returned.
        _join(self.slots, now + self.config.grace_seconds * CANCEL_AT_GRACE)
        self.cancel_all("stopping")
        _join(self.slots, deadline)
        for lease in self.ignoring_cancellation():
            logger.warning(
                "Run id=%s: its handler ignored the stop for %.1fs; giving the run back "
                "(the epoch bump fences it)",
                lease.run_id,
                time.monotonic() - lease.cancelled_at,
                extra={"run_id": lease.run_id, "reason": lease.cancel_reason},
            )
        # Each group writes the outcomes handed over and gives back what did
        # not finish in time: queued at once, and the epoch bump fences the
        # handler still running it.
        for group in self.groups:
            group.close()
        _join(self.groups, max(deadline, time.monotonic() + 10.0))
        self.stopped.set()
        aio.close_connections()
        connection.close()  # the main thread's connection sat idle since start
        retrying(
            lambda: Worker.objects.filter(id=self.config.worker_id).update(
                stopped_at=Now(), last_seen_at=Now()
            )
        )
        connection.close()
        logger.info("Worker %s stopped", self.config.worker_id)
