"""LISTEN on a dedicated autocommit connection; wake the slots a NOTIFY names.

``wake`` runs on this thread: a group that never claims ahead claims for
its idle slots right here (``runqueue.worker.wake_claims``), on the thread's own
Django connection, so an interactive run starts one thread hop after its
NOTIFY arrives."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
from django.db import connection
from psycopg import sql

from runqueue import db
from runqueue.events import wakeups
from runqueue.sql import execute
from runqueue.worker.services import reconnect_delay

logger = logging.getLogger("runqueue.worker")

#: How often an idle LISTEN connection asks whether its server is still a
#: primary (``pg_is_in_recovery()``).
RECOVERY_CHECK_SECONDS = 5.0
#: How long a LISTEN waits, after each connect, for the probe NOTIFY it sent
#: through the default database before it says it hears nothing.
PROBE_SECONDS = 5.0


class Listener(threading.Thread):
    """Never opens a transaction, never goes through Django's pooled
    connection; reconnects after a short jittered wait that never grows
    (``reconnect_delay``), and leaves a server found in recovery. ``wake(payload)`` gets the class
    name, or "" for any class (and after a reconnect, when notifies may
    have been missed)."""

    def __init__(
        self,
        channel: str,
        wake: Callable[[str], None],
        stopping: threading.Event,
        warm: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="runqueue-listener", daemon=True)
        self.channel = channel
        self.wake = wake
        #: Called once, in this thread, before the first LISTEN is in place:
        #: the wake-ups' claims run on this thread's Django connection.
        self.warm = warm
        self.stopping = stopping
        self._listening = threading.Event()
        #: Whether the last connect's probe arrived (None: not yet known;
        #: see ``_send_probe``).
        self.heard_probe: bool | None = None

    def wait_listening(self, timeout: float) -> bool:
        """True once LISTEN is in place (False if not within ``timeout``
        seconds): from then on a NOTIFY wakes the slots, no poll needed."""
        return self._listening.wait(timeout)

    def _connect(self) -> psycopg.Connection:
        conn = db.connect(db.listen_alias())
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    def run(self) -> None:
        try:
            self._listen()
        finally:
            connection.close()  # ``wake`` may claim on this thread's Django connection

    def _listen(self) -> None:
        while not self.stopping.is_set():
            try:
                with self._connect() as conn:
                    warm, self.warm = self.warm, None
                    if warm is not None:
                        warm()
                    self._listening.set()
                    self.wake("")
                    self.heard_probe = None
                    probe = self._send_probe()
                    checked = time.monotonic()
                    while not self.stopping.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if isinstance(wakeups.parse(note.payload), wakeups.Probe):
                                if note.payload == probe:
                                    probe = None
                                    self.heard_probe = True
                                continue
                            self.wake(note.payload)
                        if probe is not None and time.monotonic() - checked >= PROBE_SECONDS:
                            probe = None
                            self.heard_probe = False
                            logger.warning(
                                "LISTEN on database %r heard no NOTIFY sent through 'default' "
                                "within %.0fs (a transaction pooler between them?): workers "
                                "poll every POLL_SECONDS instead. Set "
                                "RUNQUEUE['LISTEN_DATABASE'] to a direct connection.",
                                db.listen_alias(),
                                PROBE_SECONDS,
                            )
                        if time.monotonic() - checked >= RECOVERY_CHECK_SECONDS:
                            checked = time.monotonic()
                            self._check_primary(conn)
            except psycopg.Error as exc:
                self._listening.clear()
                delay = reconnect_delay()
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                self.stopping.wait(delay)

    def _send_probe(self) -> str | None:
        """NOTIFY this LISTEN through the default database, the way a submit
        does: if it never arrives, NOTIFYs sent through "default" do not
        reach this connection (a transaction pooler hands the LISTEN's
        server session to other clients), and the log says so. None if the
        probe could not be sent (the next connect tries again)."""
        probe = wakeups.payload(wakeups.Probe(token=uuid.uuid4().hex))
        try:
            with db.connect() as conn, conn.cursor() as cursor:
                execute(cursor, "notify", {"channel": self.channel, "payload": probe})
        except psycopg.Error as exc:
            logger.info("LISTEN probe not sent (%s)", exc)
            return None
        return probe

    @staticmethod
    def _check_primary(conn: psycopg.Connection) -> None:
        """A server that became a standby without closing its sockets (a role
        flip behind a proxy) delivers no NOTIFY any more: leave it, so the
        next connection reaches the primary."""
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        if row is not None and row[0]:
            raise psycopg.OperationalError("the server is in recovery (a standby now)")
