"""One hub per web process: the LISTEN thread that wakes streams, the
watch rows that make the database send those wake-ups, and the bound on
open streams.

The trigger of migration 0002 NOTIFYs ``runqueue_events`` (payload: the run
id) for each event appended to a run that has a row in
``runqueue_stream_watch``. A stream registers its run here before its first
read, so any event committed after that read wakes it; a wake-up that is
lost anyway (a listener reconnecting, a writer whose trigger ran just before
the row was visible) costs at most ``STREAM_POLL_SECONDS``, after which the
stream reads again.

A session's stream (``runqueue.stream.session``) watches each live run of
its session here the same way, with one wake-up for all of them; a turn
that starts in a session with no live run has no watch row yet, so while
session streams are open the listener also hears the workers' channel
(``RUNQUEUE["NOTIFY_CHANNEL"]``), and each "runs became due" wake-up wakes
them: the stream reads its session's runs again and finds the new turn.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Sequence

import psycopg
from django.db import connection
from psycopg import sql

from runqueue import db
from runqueue.conf import get_settings
from runqueue.events import wakeups
from runqueue.sql import execute
from runqueue.stream import text

#: A text delta as a stream gets it: (epoch, offset, text).
Delta = tuple[int, int, str]

logger = logging.getLogger("runqueue.stream")

#: The channel the trigger sends on (fixed in the migration, as the tables are).
CHANNEL = "runqueue_events"
#: Deltas a stream keeps while its client is slow; older ones are dropped
#: (the run.text events carry the same text, by offset).
MAX_PENDING_DELTAS = 10000
#: A watch row outlives its process by at most this long.
WATCH_TTL_SECONDS = 300.0
#: How often the listener refreshes this process's rows.
REFRESH_SECONDS = 60.0


class StreamLimit(Exception):
    """A bound on open streams is full: ``scope`` is process, token or tenant."""

    def __init__(self, scope: str, limit: int) -> None:
        self.scope = scope
        self.limit = limit
        super().__init__(f"{scope} streams at their limit of {limit}")


class Place:
    """Stream places held by one stream; ``release`` gives them back once."""

    def __init__(self, hub: Hub, keys: tuple[str, ...], live: bool) -> None:
        self._hub = hub
        self._keys = keys
        self._live = live
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._hub._give_back(self._keys, self._live)


class Hub:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.watcher = f"{socket.gethostname()}-{self.pid}-{uuid.uuid4().hex[:6]}"
        self._lock = threading.Lock()
        # Watch rows are written under this lock, so a run's row is never
        # deleted by its last stream while a new stream of it registers.
        self._watch_lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        # A stream's inbox of a run's deltas, by (run, its wake-up): a
        # session's stream shares one wake-up among its runs.
        self._deltas: dict[tuple[str, threading.Event], deque[Delta]] = {}
        #: Session streams' wake-ups: set when runs become due anywhere.
        self._sessions: set[threading.Event] = set()
        self.open_streams = 0
        self._held: Counter[str] = Counter()
        self.listening = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the bounds on open streams ---------------------------------------

    def acquire(
        self, owners: Sequence[tuple[str, int | None]] = (), *, live: bool = True
    ) -> Place:
        """Take a stream place of this process (``live``) and one of each
        owner (a token, a tenant: ``(key, limit)``, None for no limit).

        Raises ``StreamLimit`` naming the first bound that is full; the
        caller's own bounds are checked before the process's, so a caller
        past its share hears that it is the one to wait.
        """
        with self._lock:
            for key, limit in owners:
                if limit is not None and self._held[key] >= limit:
                    raise StreamLimit(key.partition(":")[0], limit)
            if live and self.open_streams >= get_settings().STREAM_MAX_PER_PROCESS:
                raise StreamLimit("process", get_settings().STREAM_MAX_PER_PROCESS)
            for key, _limit in owners:
                self._held[key] += 1
            if live:
                self.open_streams += 1
        return Place(self, tuple(key for key, _ in owners), live)

    def _give_back(self, keys: tuple[str, ...], live: bool) -> None:
        with self._lock:
            for key in keys:
                self._held[key] -= 1
                if self._held[key] <= 0:
                    del self._held[key]
            if live:
                self.open_streams -= 1

    def held(self, key: str) -> int:
        """Places an owner holds in this process (tests, metrics)."""
        with self._lock:
            return self._held[key]

    # --- watching runs -----------------------------------------------------

    def watch(
        self,
        run_id: uuid.UUID,
        deltas: deque[Delta] | None = None,
        wake: threading.Event | None = None,
    ) -> threading.Event:
        """Register a stream of ``run_id``: the event (``wake``, or a new one)
        is set on each wake-up, and each text delta of the run
        (``ctx.stream``) is put in ``deltas``. Writes the watch row (on the
        caller's connection, autocommit)."""
        if self._start():
            self.listening.wait(5.0)  # the first stream; without it, the poll covers the gap
        wake = wake if wake is not None else threading.Event()
        key = str(run_id)
        with self._watch_lock:
            params = {"run_id": run_id, "watcher": self.watcher, "ttl_seconds": WATCH_TTL_SECONDS}
            with connection.cursor() as cursor:
                execute(cursor, "stream_watch", params)
            with self._lock:
                self._waiters.setdefault(key, set()).add(wake)
                if deltas is not None:
                    self._deltas[(key, wake)] = deltas
        return wake

    def unwatch(self, run_id: uuid.UUID, wake: threading.Event) -> None:
        key = str(run_id)
        with self._watch_lock:
            with self._lock:
                waiters = self._waiters.get(key, set())
                waiters.discard(wake)
                self._deltas.pop((key, wake), None)
                last = not waiters
                if last:
                    self._waiters.pop(key, None)
            if last:
                params = {"run_id": run_id, "watcher": self.watcher}
                try:
                    with connection.cursor() as cursor:
                        execute(cursor, "stream_unwatch", params)
                except Exception:  # noqa: BLE001 - the row expires by itself
                    logger.warning("Could not drop the watch row of run id=%s", run_id)

    def wake(self, payload: str) -> None:
        """Wake the streams of the run a NOTIFY names ("" wakes all)."""
        with self._lock:
            if payload:
                waiters = list(self._waiters.get(payload, ()))
            else:
                waiters = [w for ws in self._waiters.values() for w in ws]
        for wake in waiters:
            wake.set()

    def deliver(self, payload: str) -> None:
        """Hand a text delta (NOTIFY on ``runqueue_text``) to its run's streams."""
        parsed = text.parse(payload)
        if parsed is None:
            logger.warning("Ignored a malformed text delta")
            return
        run_id, epoch, offset, piece = parsed
        with self._lock:
            waiters = list(self._waiters.get(run_id, ()))
            for wake in waiters:
                inbox = self._deltas.get((run_id, wake))
                if inbox is not None:
                    inbox.append((epoch, offset, piece))
        for wake in waiters:
            wake.set()

    def watch_sessions(self, wake: threading.Event) -> None:
        """Set ``wake`` whenever runs become due (a session's stream: a new
        turn of its session may be among them)."""
        self._start()
        with self._lock:
            self._sessions.add(wake)

    def unwatch_sessions(self, wake: threading.Event) -> None:
        with self._lock:
            self._sessions.discard(wake)

    def _wake_sessions(self) -> None:
        with self._lock:
            waiters = list(self._sessions)
        for wake in waiters:
            wake.set()

    # --- the listener ------------------------------------------------------

    def _start(self) -> bool:
        """Start the listener unless it runs; True if this call started it."""
        with self._lock:
            if self._thread is not None:
                return False
            self._thread = threading.Thread(
                target=self._listen, name="runqueue-stream-listener", daemon=True
            )
        self._thread.start()
        return True

    def _connect(self) -> psycopg.Connection:
        conn = db.connect(db.listen_alias())
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(text.CHANNEL)))
        return conn

    def close(self) -> None:
        """Stop the listener (tests; a process's hub otherwise lives as long as it)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(10)

    def _listen(self) -> None:
        delay = 0.5
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    self.listening.set()
                    delay = 0.5
                    self.wake("")  # notifies may have been missed meanwhile
                    self._serve(conn)
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any error
                self.listening.clear()
                logger.warning("Stream LISTEN connection lost (%s); reconnecting", exc)
                self._stopping.wait(delay)
                delay = min(delay * 2, 30)

    def _serve(self, conn: psycopg.Connection) -> None:
        refresh = {"watcher": self.watcher, "ttl_seconds": WATCH_TTL_SECONDS}
        refresh_at = 0.0
        workers = get_settings().NOTIFY_CHANNEL
        hearing_workers = False
        while not self._stopping.is_set():
            if time.monotonic() >= refresh_at:
                execute(conn.cursor(), "stream_watch_refresh", refresh)
                refresh_at = time.monotonic() + REFRESH_SECONDS
            with self._lock:
                sessions = bool(self._sessions)
            if sessions != hearing_workers:
                # The workers' channel only while a session stream is open:
                # every submit NOTIFYs it, and no run stream needs it.
                verb = "LISTEN {}" if sessions else "UNLISTEN {}"
                conn.execute(sql.SQL(verb).format(sql.Identifier(workers)))
                hearing_workers = sessions
                if sessions:
                    self._wake_sessions()  # a due run may have been missed meanwhile
            for note in conn.notifies(timeout=1.0):
                if note.channel == text.CHANNEL:
                    self.deliver(note.payload)
                elif note.channel == CHANNEL:
                    self.wake(note.payload)
                elif isinstance(wakeups.parse(note.payload), wakeups.Due):
                    self._wake_sessions()


_hub: Hub | None = None
_hub_lock = threading.Lock()


def process_hub() -> Hub:
    """This process's hub, made on first use (after a fork, a new one)."""
    global _hub  # noqa: PLW0603 - one per process by design
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():
            _hub = Hub()
        return _hub


def reset() -> None:
    """Close this process's hub; the next stream makes a new one (tests)."""
    global _hub  # noqa: PLW0603
    with _hub_lock:
        if _hub is not None:
            _hub.close()
        _hub = None
