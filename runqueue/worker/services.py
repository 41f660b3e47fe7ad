"""What the worker's threads share: its named periodic services and the
thread that runs them (``Service``, ``Periodic``), a connection check that
costs nothing per run, and retried shutdown writes."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import (
    DatabaseError,
    close_old_connections,
    connection,
)

from runqueue.db import connection_lost

logger = logging.getLogger("runqueue.worker")

#: Seconds between attempts to reach the database again after the
#: connection was lost: drawn afresh each time from this range, never
#: growing, so work resumes within about a second of the server (or a
#: promoted standby) accepting connections however long the outage was,
#: and workers that lost it together do not come back in step.
RECONNECT_SECONDS = (0.2, 1.0)


def reconnect_delay(rng: random.Random | None = None) -> float:
    """A jittered, bounded wait before the next attempt to reconnect."""
    low, high = RECONNECT_SECONDS
    return (rng or random).uniform(low, high)  # noqa: S311 - jitter, not a secret


class ConnectionCheck:
    """``close_old_connections`` at most once a ``every`` seconds per thread.

    With CONN_HEALTH_CHECKS it makes the next query run ``SELECT 1`` first:
    worth it to notice a restarted server, not worth a round trip per run.
    After an error a thread closes its connection itself.
    """

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self._next = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            close_old_connections()


def retrying[T](write: Callable[[], T], attempts: int = 3) -> T | None:
    """A shutdown write, retried on a fresh connection if the database was
    lost (or turned read-only)."""
    for _attempt in range(attempts):
        try:
            return write()
        except DatabaseError as exc:
            if not connection_lost(exc):
                raise
            logger.warning("Shutdown write failed (%s); retrying", exc)
            connection.close()
            time.sleep(reconnect_delay())
    return None


@dataclass(frozen=True, slots=True)
class Service:
    """One named periodic job of the worker: ``tick`` about every ``every``
    seconds (spread by ``jitter`` so workers started together drift apart)."""

    name: str
    every: float
    #: What it returns is ignored (a sweep's rows, a tick's schedules).
    tick: Callable[[], object]
    jitter: float = 0.1

    def next_after(self, now: float) -> float:
        spread = self.every * self.jitter
        return now + self.every + random.uniform(-spread, spread)  # noqa: S311


class Periodic(threading.Thread):
    """Runs its services, each when due, one at a time on one connection,
    until ``until`` is set. A service that fails (a database error closes the
    connection, so the next tick reconnects) is logged by name and ticks
    again at its next turn; the others are not held back."""

    def __init__(self, name: str, services: Sequence[Service], until: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        if not services:
            raise ValueError(f"{name}: no services to run")
        self.services = tuple(services)
        self.until = until
        #: Ticks per service name (a test or the admin reads them).
        self.ticks: dict[str, int] = {s.name: 0 for s in self.services}

    def run(self) -> None:
        # Every service ticks once at start, in the declared order.
        due = [0.0] * len(self.services)
        try:
            while not self.until.is_set():
                close_old_connections()
                for i, service in enumerate(self.services):
                    if due[i] > time.monotonic() or self.until.is_set():
                        continue
                    self._tick(service)
                    due[i] = service.next_after(time.monotonic())
                self.until.wait(max(0.0, min(due) - time.monotonic()))
        finally:
            connection.close()

    def _tick(self, service: Service) -> None:
        try:
            service.tick()
        except DatabaseError as exc:
            # Lost, read-only or any other error: a fresh connection next
            # tick (to the new primary after a failover).
            what = "connection lost" if connection_lost(exc) else "database error"
            logger.warning("%s: %s (%s); retrying", service.name, what, exc)
            connection.close()
        except Exception:
            logger.exception("%s: tick failed", service.name)
        self.ticks[service.name] += 1
