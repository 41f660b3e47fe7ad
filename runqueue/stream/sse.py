"""A run's events as Server-Sent Events: replay after a cursor, then live.

Each event is one SSE message: ``id:`` the event id (so a reconnecting
client's ``Last-Event-ID`` resumes after it), ``event:`` its type, ``data:``
the event as the events endpoint shows it. The stream ends after a terminal
event (``run.succeeded``, ``run.failed``, ``run.cancelled``).

Text a handler streams (``ctx.stream``) comes as ``run.text`` messages whose
data is ``{"offset": ..., "text": ...}``: each live delta as it is sent
(no ``id:``, so ``Last-Event-ID`` stays at the last stored event), and each
stored chunk with its id. A client writes each text at its offset (in
characters, i.e. code points) and starts a turn's text afresh at each
``run.claimed``; whatever it saw twice, it ends with the text the handler
streamed. A delta of an earlier lease than the stream has shown is dropped;
one of a later lease waits until the stream has read that lease's claim.

A message's ``id:`` is a cursor, ``<event id>.<stamp>``: the event's id and
its commit time in microseconds (base 36). An id alone can be issued twice:
after a failover that lost the last WAL, the promoted standby gives the lost
events' ids to new ones, and a client resuming "after 43" would skip the new
34-43. A reconnecting client's cursor is honoured only if this server holds
that event of that run with that stamp; otherwise the cursor is not on this
server's history, and the stream starts with a ``stream.reset`` message
(discard what you have) and replays the run from its first event. A plain
number (an older client, or ``?after=``) is resumed after as before.

Resuming by id loses nothing because a run's event ids follow commit order:
every transaction that appends an event to a run holds the run row's lock
(its fence, claim, finish or transition UPDATE, or ``FOR UPDATE``) or
created the run, so a later id of the same run cannot commit first.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Generator

from django.db import DatabaseError

from runqueue import events
from runqueue.conf import get_settings
from runqueue.models import EventLog, Run
from runqueue.stream.hub import MAX_PENDING_DELTAS, Delta, Hub, Place

TERMINAL_EVENTS = frozenset({events.SUCCEEDED, events.FAILED, events.CANCELLED})
#: Events read per query while replaying.
BATCH = 500
#: The reconnection delay browsers' EventSource should use, in ms.
RETRY_MS = 2000
KEEPALIVE = b": keep-alive\n\n"

logger = logging.getLogger("runqueue.stream")


#: The message that tells a client its cursor is not on this server's history.
RESET = "stream.reset"


def stamp(created_at: dt.datetime) -> str:
    """An event's commit time in microseconds since the epoch, base 36."""
    micros = (created_at - EPOCH) // dt.timedelta(microseconds=1)
    return _base36(micros)


def cursor(event: EventLog) -> str:
    """The event's ``id:``: what a lost timeline cannot issue again."""
    return f"{event.id}.{stamp(event.created_at)}"


def parse_cursor(text: str) -> tuple[int, str | None]:
    """``"43.lq3x..."`` -> (43, "lq3x..."); ``"43"`` -> (43, None).
    ValueError for anything else."""
    number, dot, mark = text.partition(".")
    if not (number.isascii() and number.isdigit()) or len(number) > 19 or int(number) > 2**63 - 1:
        raise ValueError("expected an event id")
    if dot and not (
        mark.isascii() and mark.isalnum() and mark == mark.lower() and len(mark) <= 13
    ):
        raise ValueError("expected an event id and its stamp")
    return int(number), mark if dot else None


def on_this_history(run_id: uuid.UUID, after: int, mark: str | None) -> bool:
    """Whether this server holds the event a cursor names (a plain number:
    assumed so)."""
    if mark is None or after == 0:
        return True
    created = (
        EventLog.objects.filter(run_id=run_id, id=after)
        .values_list("created_at", flat=True)
        .first()
    )
    return created is not None and stamp(created) == mark


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def frame(
    event: EventLog,
    *,
    operator: bool = False,
    message_id: str | None = None,
    run_id: uuid.UUID | None = None,
) -> bytes:
    """One SSE message; JSON escapes newlines, so ``data`` is one line. A
    ``run.text`` chunk's data is its offset and text, as a delta's is.
    ``operator``: a staff reader, who sees the lease's internals.
    ``message_id``: the ``id:`` (default: the event's cursor); ``run_id``:
    put in the data first (a session's stream, which carries many runs)."""
    type_ = event.type.replace("\r", " ").replace("\n", " ")
    body = event.data if event.type == events.TEXT else events.event_body(event, operator=operator)
    if run_id is not None:
        body = {"run_id": str(run_id), **(body if isinstance(body, dict) else {"data": body})}
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return f"id: {message_id or cursor(event)}\nevent: {type_}\ndata: {data}\n\n".encode()


def reset_frame() -> bytes:
    """``stream.reset``: what the client holds is not this server's history
    (a failover lost it); the run's events follow from the first."""
    data = json.dumps({"reason": "the cursor is not on this server's history"})
    return f"event: {RESET}\ndata: {data}\n\n".encode()


def text_frame(offset: int, text: str, run_id: uuid.UUID | None = None) -> bytes:
    """A live delta: a ``run.text`` message without an id (``run_id`` first
    in its data on a session's stream)."""
    body: dict[str, object] = {"offset": offset, "text": text}
    if run_id is not None:
        body = {"run_id": str(run_id), **body}
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return f"event: {events.TEXT}\ndata: {data}\n\n".encode()


def has_events_after(run_id: uuid.UUID, after: int) -> bool:
    return EventLog.objects.filter(run_id=run_id, id__gt=after).exists()


class Followed:
    """A run a stream follows: the last of its events shown, the latest of
    its leases shown (whose text deltas are sent) and the deltas received."""

    __slots__ = ("after", "deltas", "done", "epoch", "run_id", "watched")

    def __init__(self, run_id: uuid.UUID, after: int, epoch: int) -> None:
        self.run_id = run_id
        self.after = after
        self.epoch = epoch
        self.deltas: deque[Delta] = deque(maxlen=MAX_PENDING_DELTAS)
        #: Its terminal event was shown (a session's stream reads it no more).
        self.done = False
        #: It has a watch in the hub (its events wake the stream).
        self.watched = False

    def live_text(self, session: bool) -> tuple[bytes, bool]:
        """The deltas received of the lease shown, as messages, and whether
        one of a later lease waits (it stays queued). Earlier leases' are
        dropped: their text is no longer the run's."""
        out: list[bytes] = []
        while self.deltas:
            epoch, offset, text = self.deltas[0]
            if epoch > self.epoch:
                return b"".join(out), True
            self.deltas.popleft()
            if epoch == self.epoch:
                out.append(text_frame(offset, text, self.run_id if session else None))
        return b"".join(out), False


class Stream:
    """The response body of one stream: an iterator of bytes whose
    ``close()`` (called by the WSGI server, also on a client disconnect)
    gives the stream's places back. The loop is shared: replay after the
    cursor, then wait for a wake-up (or the poll) and read again, sending
    the text deltas of the leases shown, until the end or
    ``STREAM_MAX_SECONDS``. What is read, how a message looks and when the
    stream ends are a subclass's: one run (``EventStream``) or a session's
    runs (``runqueue.stream.session.SessionStream``)."""

    #: What the log says when the stream ends on a database error.
    label = "stream"
    #: Messages name their run (a session's stream carries many).
    carries_runs = False

    def __init__(
        self, hub: Hub, place: Place, *, reset: bool = False, operator: bool = False
    ) -> None:
        self.hub = hub
        self.operator = operator
        self.reset = reset
        self.place = place
        #: Set by the hub on a wake-up of any run the stream watches.
        self.wake = threading.Event()
        #: Streamed up to now, then the stream ends (a finished run).
        self.ends_when_replayed = False
        self._closed = False
        self._body = self._events()

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._body)
        except DatabaseError as exc:
            # The client reconnects with Last-Event-ID and loses nothing.
            logger.warning("%s ended: database error (%s)", self.label, exc)
            raise StopIteration from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._body.close()
        finally:
            self.place.release()

    # --- what a subclass says ------------------------------------------------

    def _follows(self) -> list[Followed]:
        """The runs followed now (their deltas are sent)."""
        raise NotImplementedError

    def _read(self) -> list[EventLog]:
        """The next events to show, in order (at most BATCH)."""
        raise NotImplementedError

    def _show(self, event: EventLog) -> bytes:
        """``event``'s message, the stream's position moved past it."""
        raise NotImplementedError

    def _ends_after(self, event: EventLog) -> bool:
        return False

    def _watch(self) -> None:
        """Register with the hub before the first read: an event committed
        after the read wakes the stream."""

    def _sync(self) -> None:
        """Before each read: the runs to follow, watched or not."""

    def _unwatch(self) -> None:
        """Give back every registration (the stream ends)."""

    # --- the loop ------------------------------------------------------------

    def _events(self) -> Generator[bytes, None, None]:
        conf = get_settings()
        started = time.monotonic()
        deadline = started + conf.STREAM_MAX_SECONDS
        yield f"retry: {RETRY_MS}\n\n".encode()
        if self.reset:
            yield reset_frame()
        if self.ends_when_replayed:
            # Nothing to wait for: no watch row, no wake-ups, just the replay.
            while batch := self._read():
                for event in batch:
                    yield self._show(event)
                    if self._ends_after(event):
                        return
            return
        try:
            self._watch()
            next_keepalive = started + conf.STREAM_KEEPALIVE_SECONDS
            reread = False
            while True:
                self.wake.clear()  # a wake-up during the read makes the wait return at once
                self._sync()
                batch = self._read()
                for event in batch:
                    yield self._show(event)
                    if self._ends_after(event):
                        return
                now = time.monotonic()
                if batch:
                    next_keepalive = now + conf.STREAM_KEEPALIVE_SECONDS
                    if len(batch) == BATCH:
                        continue  # more to replay
                sent, ahead = self._live_text()
                if sent:
                    yield sent
                    next_keepalive = time.monotonic() + conf.STREAM_KEEPALIVE_SECONDS
                if ahead:
                    if batch or not reread:
                        reread = True
                        continue  # a later lease's delta: read its claim first
                    # Its claim committed before it was sent, so a read since
                    # would have shown it; should it not have, show the lease.
                    for follow in self._follows():
                        if follow.deltas and follow.deltas[0][0] > follow.epoch:
                            follow.epoch = follow.deltas[0][0]
                    continue
                reread = False
                if now >= deadline:
                    return
                timeout = min(next_keepalive, deadline) - now
                if not self.wake.wait(min(timeout, conf.STREAM_POLL_SECONDS)):
                    # No wake-up: read again anyway (a lost NOTIFY costs this
                    # long at most), and keep the connection alive when due.
                    if time.monotonic() >= next_keepalive:
                        yield KEEPALIVE
                        next_keepalive = time.monotonic() + conf.STREAM_KEEPALIVE_SECONDS
        finally:
            self._unwatch()

    def _live_text(self) -> tuple[bytes, bool]:
        """The followed runs' deltas of the leases shown, and whether one of
        a later lease waits."""
        sent, ahead = [], False
        for follow in self._follows():
            text, later = follow.live_text(session=self.carries_runs)
            sent.append(text)
            ahead = ahead or later
        return b"".join(sent), ahead


class EventStream(Stream):
    """One run's stream: its events after the cursor, up to its terminal
    event (``GET /api/runs/<id>/stream/``)."""

    def __init__(
        self,
        hub: Hub,
        run: Run,
        after: int,
        place: Place,
        *,
        reset: bool = False,
        operator: bool = False,
    ) -> None:
        self.run_id = run.id
        self.label = f"Stream of run id={run.id}"
        #: The latest lease the stream has shown: its deltas are sent.
        self.followed = Followed(run.id, after, run.lease_epoch)
        super().__init__(hub, place, reset=reset, operator=operator)
        # A run already finished is streamed up to now, then the stream ends
        # (nothing after its terminal event moves it, bar an operator).
        self.ends_when_replayed = run.is_terminal

    @property
    def after(self) -> int:
        return self.followed.after

    @property
    def epoch(self) -> int:
        return self.followed.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.followed.epoch = value

    @property
    def deltas(self) -> deque[Delta]:
        return self.followed.deltas

    def _follows(self) -> list[Followed]:
        return [self.followed]

    def _read(self) -> list[EventLog]:
        return list(
            EventLog.objects.filter(run_id=self.run_id, id__gt=self.after).order_by("id")[:BATCH]
        )

    def _show(self, event: EventLog) -> bytes:
        self.followed.after = event.id
        self.followed.epoch = max(self.followed.epoch, event.lease_epoch)
        return frame(event, operator=self.operator)

    def _ends_after(self, event: EventLog) -> bool:
        return event.type in TERMINAL_EVENTS

    def _watch(self) -> None:
        self.hub.watch(self.run_id, self.followed.deltas, self.wake)
        self.followed.watched = True

    def _unwatch(self) -> None:
        if self.followed.watched:
            self.followed.watched = False
            self.hub.unwatch(self.run_id, self.wake)
