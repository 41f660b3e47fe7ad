"""One slot: wait for a wake-up, take a run from its group's feed (which
claims for every idle slot of the group at once), run it, repeat."""

from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING

from django.db import DatabaseError, close_old_connections, connection

from runqueue import leases, observe, runtime
from runqueue.models import PriorityClass
from runqueue.worker.feed import Empty, Feed

if TYPE_CHECKING:
    from runqueue.worker.pool import Pool

logger = logging.getLogger("runqueue.worker")


class Slot(threading.Thread):
    def __init__(
        self, pool: Pool, name: str, classes: tuple[PriorityClass, ...], feed: Feed
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.pool = pool
        self.classes = classes
        self.class_names = {c.name.lower() for c in classes}
        self.wake = threading.Event()
        self.owner = f"{pool.config.worker_id}/{name}"
        self.current: leases.Lease | None = None
        self.feed = feed
        feed.join(self.wake)

    def run(self) -> None:
        config = self.pool.config
        delay = 0.5
        try:
            while not self.pool.stopping.is_set():
                close_old_connections()
                # Clear before claiming: a NOTIFY that lands during the claim
                # makes the wait below return at once.
                self.wake.clear()
                try:
                    lease = self.feed.take(self.owner, self.wake)
                except DatabaseError as exc:
                    logger.warning(
                        "%s: claim failed (%s); retrying in %.1fs", self.name, exc, delay
                    )
                    connection.close()
                    self.pool.stopping.wait(delay)
                    delay = min(delay * 2, 30)
                    continue
                delay = 0.5
                if lease is Empty.CLAIMING:
                    # Another slot of the group is claiming; it wakes the
                    # group when done (the poll is only a safety net).
                    self.wake.wait(config.poll_seconds)
                    continue
                if lease is Empty.NOTHING_DUE:
                    if config.burst:
                        return
                    self.wake.wait(config.poll_seconds * random.uniform(0.9, 1.1))  # noqa: S311
                    continue
                try:
                    self._run(lease)
                finally:
                    self.feed.done()
        finally:
            connection.close()

    def _run(self, lease: leases.Lease) -> None:
        run = lease.run
        observe.claimed(lease)  # log line, metrics
        self.current = lease
        self.pool.hold(lease)
        self.pool.started(lease)
        outcome = "error"
        try:
            with observe.run_span(lease):  # OpenTelemetry; ended by observe.finished
                outcome = runtime.execute(lease, self.pool.completer)
        except DatabaseError as exc:
            # Lost the database mid-run: the lease expires and the sweeper
            # requeues the run; nothing here can be trusted to have committed.
            logger.warning(
                "Run id=%s: database error (%s); leaving it to the sweeper", run.id, exc
            )
            connection.close()
        except Exception:
            logger.exception("Run id=%s: the runtime failed", run.id)
        finally:
            self.current = None
            if outcome != runtime.HANDED_OVER:
                # A handed-over finish is the completer's to report: the pool
                # holds the lease until its batch committed.
                self.pool.finished(lease, outcome)
