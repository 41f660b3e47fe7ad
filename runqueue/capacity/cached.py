"""A value read from the database and kept per process: whether a claim
must take the capped walk (``runqueue.capacity.concurrency``'s limits,
``runqueue.capacity.budgets``' budgets) is asked on every claim, and changes
rarely. A change made here, or heard of (a ``wakeups.Changed`` NOTIFY),
invalidates it; the worker's sweeper tick refreshes it, so a NOTIFY missed
costs at most one tick."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Cached[T]:
    """``read()``'s value, read on first use and again after ``invalidate``."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._lock = threading.Lock()
        #: (value,) once read; None: read it on next use.
        self._held: tuple[T] | None = None

    def get(self) -> T:
        held = self._held
        if held is None:
            held = (self._read(),)
            with self._lock:
                # A refresh that finished meanwhile is newer: keep it.
                if self._held is None:
                    self._held = held
        return held[0]

    def invalidate(self) -> None:
        with self._lock:
            self._held = None

    def refresh(self) -> T:
        held = (self._read(),)
        with self._lock:
            self._held = held
        return held[0]
