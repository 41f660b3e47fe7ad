"""Background loops shared by the pool: each runs ``tick`` every interval,
survives database errors (closing its connection so the next tick
reconnects), and stops when the pool stops."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections, connection

logger = logging.getLogger("runqueue.worker")


class Periodic(threading.Thread):
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
        self.ticks = 0

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                close_old_connections()
                try:
                    self.tick()
                    self.ticks += 1
                except DatabaseError as exc:
                    logger.warning("%s: database error (%s); retrying", self.name, exc)
                    connection.close()
                except Exception:
                    logger.exception("%s: tick failed", self.name)
                spread = self.interval * self.jitter
                self.stopping.wait(self.interval + random.uniform(-spread, spread))  # noqa: S311
        finally:
            connection.close()
