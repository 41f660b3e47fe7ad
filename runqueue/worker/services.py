"""What the worker's threads share: the background loop (``Periodic``), a
connection check that costs nothing per run, and retried shutdown writes."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)

logger = logging.getLogger("runqueue.worker")


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
    """A shutdown write, retried on a fresh connection if the database was lost."""
    for attempt in range(attempts):
        try:
            return write()
        except (OperationalError, InterfaceError) as exc:
            logger.warning("Shutdown write failed (%s); retrying", exc)
            connection.close()
            time.sleep(0.2 * (attempt + 1))
    return None


class Periodic(threading.Thread):
    """Runs ``tick`` every interval, survives database errors (closing its
    connection so the next tick reconnects), and stops when the pool stops."""

    def __init__(
        self,
        name: str,
        interval: float,
        tick: Callable[[], None],
        stopping: threading.Event,
        *,
        jitter: float = 0.1,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.tick = tick
        self.stopping = stopping
        self.jitter = jitter

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                close_old_connections()
                try:
                    self.tick()
                except DatabaseError as exc:
                    logger.warning("%s: database error (%s); retrying", self.name, exc)
                    connection.close()
                except Exception:
                    logger.exception("%s: tick failed", self.name)
                spread = self.interval * self.jitter
                self.stopping.wait(self.interval + random.uniform(-spread, spread))  # noqa: S311
        finally:
            connection.close()
