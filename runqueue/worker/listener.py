"""LISTEN on a dedicated autocommit connection; wake the slots a NOTIFY names.

``wake`` runs on this thread: a group that never claims ahead claims for
its idle slots right here (``runqueue.worker.group``), on the thread's own
Django connection, so an interactive run starts one thread hop after its
NOTIFY arrives."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from django.db import connection
from psycopg import sql

from runqueue import db

logger = logging.getLogger("runqueue.worker")


class Listener(threading.Thread):
    """Never opens a transaction, never goes through Django's pooled
    connection; reconnects with backoff. ``wake(payload)`` gets the class
    name, or "" for any class (and after a reconnect, when notifies may
    have been missed)."""

    def __init__(
        self, channel: str, wake: Callable[[str], None], stopping: threading.Event
    ) -> None:
        super().__init__(name="runqueue-listener", daemon=True)
        self.channel = channel
        self.wake = wake
        self.stopping = stopping
        self._listening = threading.Event()

    def wait_listening(self, timeout: float) -> bool:
        """True once LISTEN is in place (False if not within ``timeout``
        seconds): from then on a NOTIFY wakes the slots, no poll needed."""
        return self._listening.wait(timeout)

    def _connect(self) -> psycopg.Connection:
        conn = db.connect()
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    def run(self) -> None:
        try:
            self._listen()
        finally:
            connection.close()  # ``wake`` may claim on this thread's Django connection

    def _listen(self) -> None:
        delay = 0.5
        while not self.stopping.is_set():
            try:
                with self._connect() as conn:
                    self._listening.set()
                    delay = 0.5
                    self.wake("")
                    while not self.stopping.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self.wake(note.payload)
            except psycopg.Error as exc:
                self._listening.clear()
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, 30)
