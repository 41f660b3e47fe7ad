"""``ctx.stream``: a turn's text, live to every watching client at once
and durable in a few ``run.text`` events, never a row per delta.

Each delta goes out as NOTIFY ``runqueue_text`` in one statement that
checks the lease under the run row's share lock (``leases.publish_text``),
so a fenced worker's delta reaches no one. The deltas are also kept here
and written as ``run.text`` events (through the fence) once
``STREAM_TEXT_FLUSH_BYTES`` are buffered or the oldest has waited
``STREAM_TEXT_FLUSH_MS``: by the next delta, or by this process's flusher
if the handler streams nothing more meanwhile; the turn's end flushes the
rest before its outcome is written. A delta and a chunk both carry the
offset (characters of the turn's text before them), so a client writes
each where it belongs, whatever it saw twice. A turn's text starts at
offset 0 at each claim (``run.claimed``): a retried or resumed attempt
streams its own.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from runqueue import events, leases
from runqueue.conf import get_settings

logger = logging.getLogger("runqueue.stream")

#: The channel deltas are sent on; the stream hub LISTENs to it.
CHANNEL = "runqueue_text"
#: PostgreSQL refuses NOTIFY payloads of 8000 bytes or more; a piece's text
#: is at most this many bytes, which leaves room for its header.
PIECE_BYTES = 7800
#: A flush that failed (not fenced: the write raised) is tried again by the
#: flusher after ``STREAM_TEXT_FLUSH_MS``, and no sooner than this.
RETRY_SECONDS = 1.0


def check_delta(text: object) -> str:
    """``text`` if ``ctx.stream`` may send it; else TypeError or ValueError."""
    if not isinstance(text, str):
        raise TypeError(f"ctx.stream takes a str, got {type(text).__name__}")
    if "\x00" in text:
        raise ValueError("ctx.stream text contains NUL (\\x00), which PostgreSQL cannot store")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"ctx.stream text is not valid Unicode: {exc.reason}") from None
    return text


def split(text: str, limit: int) -> list[str]:
    """``text`` cut at character boundaries into pieces of at most ``limit``
    UTF-8 bytes (a character is at most 4, so ``limit`` >= 4)."""
    if len(text) * 4 <= limit or len(text.encode()) <= limit:
        return [text]
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + limit)  # at least one byte per character
        while len(text[start:end].encode()) > limit:
            end = start + max(1, (end - start) * 3 // 4)
        pieces.append(text[start:end])
        start = end
    return pieces


def payload(run_id: uuid.UUID, epoch: int, offset: int, text: str) -> str:
    """A delta as NOTIFY sends it: ``<run id> <epoch> <offset> <text>``."""
    return f"{run_id} {epoch} {offset} {text}"


def parse(note: str) -> tuple[str, int, int, str] | None:
    """(run id, epoch, offset, text) of a delta's payload; None if malformed."""
    parts = note.split(" ", 3)
    if len(parts) != 4:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2]), parts[3]
    except ValueError:
        return None


class TurnText:
    """The text one lease's handler streams: its offset, and the tail not
    yet durable. Safe to use from the handler's thread and the flusher."""

    def __init__(self, lease: leases.Lease) -> None:
        self.lease = lease
        self.offset = 0  # characters streamed so far in this turn
        self.durable = 0  # characters in run.text events
        self._pending: list[str] = []
        self._pending_bytes = 0
        self._since = 0.0  # when the oldest pending delta was streamed
        self._lock = threading.Lock()
        # Held across a flush's write: chunks commit in offset order, and the
        # turn's last flush waits for one the flusher has under way.
        self._flush_lock = threading.Lock()

    def stream(self, text: str) -> bool:
        """Send a delta to the live clients and buffer it; False once fenced."""
        check_delta(text)
        if not text:
            return not self.lease.fenced
        with self._lock:
            pieces, offset = [], self.offset
            for piece in split(text, PIECE_BYTES):
                pieces.append(payload(self.lease.run_id, self.lease.epoch, offset, piece))
                offset += len(piece)
            if not leases.publish_text(self.lease, pieces):
                return False
            self.offset = offset
            first = not self._pending
            if first:
                self._since = time.monotonic()
            self._pending.append(text)
            self._pending_bytes += len(text.encode())
            due = self._due()
        if due:
            return self.flush()
        if first:
            flusher().track(self)  # outside the lock: the flusher takes both
        return True

    def _due(self) -> bool:
        conf = get_settings()
        return (
            self._pending_bytes >= conf.STREAM_TEXT_FLUSH_BYTES
            or time.monotonic() - self._since >= conf.STREAM_TEXT_FLUSH_MS / 1000
        )

    def deadline(self) -> float | None:
        """When the pending text is due (``time.monotonic()``), or None."""
        with self._lock:
            if not self._pending:
                return None
            return self._since + get_settings().STREAM_TEXT_FLUSH_MS / 1000

    def flush(self) -> bool:
        """Write the pending text as ``run.text`` events (each at most
        ``STREAM_TEXT_FLUSH_BYTES``); False once fenced (the text is dropped:
        it is no longer this worker's run). A write that raises (its
        connection lost) raises here with its text pending again."""
        with self._flush_lock:
            with self._lock:
                text, self._pending, self._pending_bytes = "".join(self._pending), [], 0
                offset = self.durable
                self.durable += len(text)
            chunks = split(text, get_settings().STREAM_TEXT_FLUSH_BYTES) if text else []
            for done, chunk in enumerate(chunks):
                try:
                    written = leases.append_event(
                        self.lease, events.TEXT, {"offset": offset, "text": chunk}
                    )
                except BaseException:
                    # Not written (a lost connection, a server restart): the
                    # text goes back in front of what was streamed since, so
                    # the next flush (the turn's end at the latest) writes it.
                    self._unwrite(offset, "".join(chunks[done:]))
                    raise
                if not written:
                    return False
                offset += len(chunk)
            return not self.lease.fenced

    def _unwrite(self, offset: int, text: str) -> None:
        with self._lock:
            self._pending.insert(0, text)
            self._pending_bytes += len(text.encode())
            self.durable = offset
            # Due again in STREAM_TEXT_FLUSH_MS, but no sooner than a second:
            # the flusher does not spin on a server that is away.
            wait = max(0.0, RETRY_SECONDS - get_settings().STREAM_TEXT_FLUSH_MS / 1000)
            self._since = time.monotonic() + wait


class Flusher:
    """One thread per process that flushes a turn's text once it is due,
    when its handler streams nothing more for a while (a long tool call, a
    model thinking): a reconnecting client then waits at most
    ``STREAM_TEXT_FLUSH_MS`` for text it missed."""

    def __init__(self) -> None:
        self._turns: set[TurnText] = set()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def track(self, turn: TurnText) -> None:
        with self._cond:
            self._turns.add(turn)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="runqueue-text-flusher", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        from django.db import connection

        while True:
            with self._cond:
                now = time.monotonic()
                due, wait = [], get_settings().STREAM_TEXT_FLUSH_MS / 1000
                for turn in list(self._turns):
                    deadline = turn.deadline()
                    if deadline is None or turn.lease.fenced or turn.lease.closed:
                        self._turns.discard(turn)
                    elif deadline <= now:
                        due.append(turn)
                        self._turns.discard(turn)
                    else:
                        wait = min(wait, deadline - now)
                if not due:
                    if not self._turns:
                        # Nothing pending: hold no connection while idle
                        # (a turn that ended flushed its own text).
                        connection.close()
                    self._cond.wait(wait)
                    continue
            for turn in due:
                try:
                    turn.flush()
                except Exception:  # noqa: BLE001 - the text stays pending; try again
                    logger.warning("Could not flush the text of run id=%s", turn.lease.run_id)
                    connection.close_if_unusable_or_obsolete()
                    with self._cond:
                        self._turns.add(turn)
            with self._cond:
                idle = not self._turns
            if idle:
                connection.close()  # held only while some turn has text pending


_flusher = Flusher()


def flusher() -> Flusher:
    return _flusher
