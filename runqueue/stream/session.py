"""A session's stream (``GET /api/sessions/<id>/stream/``): every turn's
events on one Server-Sent Events stream, in order, each naming its run,
resumable across turns, open for the turns to come.

It is the run stream's loop (``sse.Stream``) over the session's runs
instead of one: before each read it finds the session's runs that may
still get events (live ones, and those finished since the stream's
start), watches the live ones in the hub with one wake-up, and reads each
run's events after the last it showed of that run. The hub also wakes it
when runs become due anywhere, so a turn that starts in an idle session
shows at once; a pending turn added behind the active one shows at the
next wake-up of the session (the active run's next event) or poll.

Order. Events come in id order. Every write that appends to the session's
active run, or adds a turn behind it, holds the active run's row lock, so
those ids follow commit order as a run's own do (``sse``). A write to a
pending turn alone (its cancel or expiry, a signal it keeps) or a fork's
note on a finished turn holds only that turn's lock and can commit after a
later id of another turn: the stream still shows it (it keeps a position
per run), after the later one.

A message's ``id:`` is ``<run id hex>:<event id>.<stamp>``, the run's
stream cursor of the highest event shown, with its run (events are found
by run). Resuming after it sends every event of the session's runs with a
higher id; an event of the kind above that commits after the client left
with a lower id than one it had already seen is not sent again: a client
that must see a pending turn's cancel reads the session
(``GET /api/sessions/<id>/``), which is exact. A cursor not on this
server's history (a failover) starts again after ``stream.reset``.

Without a cursor the stream starts with the session's newest finished turn
(the answer on screen) and its live turns, from their first events: a
session of years is never replayed whole. A session has no end: the stream
ends after ``STREAM_MAX_SECONDS`` (the run stream's bound; the client
resumes with ``Last-Event-ID``) or when the client goes.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db.models import Q

from runqueue import db as clock
from runqueue.models import LIVE_STATUSES, EventLog, Run
from runqueue.reads import sessions
from runqueue.stream.hub import Hub, Place
from runqueue.stream.sse import (
    BATCH,
    TERMINAL_EVENTS,
    Followed,
    Stream,
    frame,
    parse_cursor,
    stamp,
)

#: How far before a resumed cursor's event a turn may have finished and
#: still have events after it: its finish (and its event) is stamped at
#: the finishing transaction's start, which may precede the cursor's.
FINISHED_MARGIN = dt.timedelta(minutes=10)


def session_cursor(run_id: uuid.UUID, event: EventLog) -> str:
    """A session stream's message id: the run and the run stream's cursor."""
    return f"{run_id.hex}:{event.id}.{stamp(event.created_at)}"


def parse_session_cursor(text: str) -> tuple[uuid.UUID, int, str | None]:
    """(run id, event id, stamp) of ``session_cursor``'s text; ValueError
    for anything else."""
    run_hex, colon, rest = text.partition(":")
    if not colon or len(run_hex) != 32 or any(c not in "0123456789abcdef" for c in run_hex):
        raise ValueError("expected a run id and an event id")
    after, mark = parse_cursor(rest)
    return uuid.UUID(run_hex), after, mark


class SessionStream(Stream):
    """The stream of one session's runs (``open_session_stream``)."""

    carries_runs = True

    def __init__(
        self,
        hub: Hub,
        tenant: str,
        session_id: str,
        place: Place,
        *,
        after: int,
        since: dt.datetime,
        start: list[tuple[uuid.UUID, int]],
        seen: list[uuid.UUID],
        last: str | None,
        reset: bool = False,
        operator: bool = False,
    ) -> None:
        self.tenant = tenant
        self.session_id = session_id
        self.label = f"Stream of session {session_id!r} of tenant {tenant!r}"
        #: Events at or below it were shown before (the resumed cursor's).
        self.floor = after
        #: Finished runs found are followed if they finished since.
        self.since = since
        #: The runs followed, by id (``start``: with their epochs now), and
        #: those not to be (``seen``: finished before the stream began).
        self.runs: dict[uuid.UUID, Followed] = {}
        for run_id, epoch in start:
            self.runs[run_id] = Followed(run_id, after, epoch)
        for run_id in seen:
            self.runs.setdefault(run_id, Followed(run_id, after, 0)).done = True
        #: The highest event shown: (event id, the message id it gave).
        self.highest = (after, last)
        super().__init__(hub, place, reset=reset, operator=operator)

    def _follows(self) -> list[Followed]:
        return list(self.runs.values())

    def _sync(self) -> None:
        """The session's runs that may get events: the live ones and those
        finished since the start. Live ones are watched; a run whose
        terminal event was shown is read no more unless it is live again
        (an operator's requeue)."""
        runs = Run.objects.filter(tenant=self.tenant, session_id=self.session_id)
        wanted = Q(status__in=LIVE_STATUSES) | Q(finished_at__gte=self.since)
        rows = runs.filter(wanted).values_list("id", "status", "lease_epoch")
        for run_id, status, epoch in rows:
            follow = self.runs.get(run_id)
            if follow is None:
                follow = self.runs[run_id] = Followed(run_id, self.floor, epoch)
            live = status in LIVE_STATUSES
            if live:
                follow.done = False
            if live and not follow.watched:
                self.hub.watch(run_id, follow.deltas, self.wake)
                follow.watched = True
        for follow in self.runs.values():
            if follow.done and follow.watched:
                follow.watched = False
                self.hub.unwatch(follow.run_id, self.wake)

    def _read(self) -> list[EventLog]:
        """The next events of the runs followed, each after the last shown
        of its run, in id order: one index probe per run (the events' key
        is (run, id))."""
        open_runs = [f for f in self.runs.values() if not f.done]
        if not open_runs:
            return []
        after = Q()
        for follow in open_runs:
            after |= Q(run_id=follow.run_id, id__gt=follow.after)
        return list(EventLog.objects.filter(after).order_by("id")[:BATCH])

    def _show(self, event: EventLog) -> bytes:
        follow = self.runs[event.run_id]
        follow.after = event.id
        follow.epoch = max(follow.epoch, event.lease_epoch)
        if event.type in TERMINAL_EVENTS:
            follow.done = True
        if event.id > self.highest[0] or self.highest[1] is None:
            self.highest = (event.id, session_cursor(event.run_id, event))
        return frame(
            event, operator=self.operator, message_id=self.highest[1], run_id=event.run_id
        )

    def _watch(self) -> None:
        self.hub.watch_sessions(self.wake)

    def _unwatch(self) -> None:
        self.hub.unwatch_sessions(self.wake)
        for follow in self.runs.values():
            if follow.watched:
                follow.watched = False
                self.hub.unwatch(follow.run_id, self.wake)


def open_session_stream(
    hub: Hub,
    tenant: str,
    session_id: str,
    cursor: tuple[uuid.UUID, int, str | None] | None,
    owners: list[tuple[str, int | None]],
    *,
    operator: bool = False,
) -> SessionStream:
    """The stream of the session, after ``cursor`` (``parse_session_cursor``)
    or from its newest finished turn and its live turns. It is always live:
    it takes a place of the process and of each owner (``StreamLimit``)."""
    resumed = None
    if cursor is not None:
        run_id, after, mark = cursor
        created = _event_time(run_id, after)
        mine = Run.objects.filter(tenant=tenant, session_id=session_id, id=run_id).exists()
        # Not this session's, or not on this server's history: start again.
        if mine and created is not None and (mark is None or stamp(created) == mark):
            resumed = (run_id, after, created)
    place = hub.acquire(owners, live=True)
    runs = Run.objects.filter(tenant=tenant, session_id=session_id)
    if resumed is not None:
        run_id, after, created = resumed
        since = created - FINISHED_MARGIN
        start = list(runs.filter(id=run_id).values_list("id", "lease_epoch"))
        seen: list[uuid.UUID] = []
        last: str | None = f"{run_id.hex}:{after}.{stamp(created)}"
    else:
        # The newest finished turn and the live ones from their first
        # events; the others finished lately are not followed (a run found
        # later is new: followed from its first event).
        after, last = 0, None
        since = clock.db_now() - FINISHED_MARGIN
        newest = (
            sessions.newest_turns(tenant, session_id)
            .exclude(status__in=LIVE_STATUSES)
            .values_list("id", "lease_epoch")
            .first()
        )
        recent = runs.filter(Q(status__in=LIVE_STATUSES) | Q(finished_at__gte=since))
        rows = list(recent.values_list("id", "status", "lease_epoch"))
        start = [(i, epoch) for i, status, epoch in rows if status in LIVE_STATUSES]
        if newest is not None:
            start.append(newest)
        seen = [i for i, _status, _epoch in rows if i not in {r for r, _ in start}]
    return SessionStream(
        hub,
        tenant,
        session_id,
        place,
        after=after,
        since=since,
        start=start,
        seen=seen,
        last=last,
        reset=cursor is not None and resumed is None,
        operator=operator,
    )


def _event_time(run_id: uuid.UUID, event_id: int) -> dt.datetime | None:
    return (
        EventLog.objects.filter(run_id=run_id, id=event_id)
        .values_list("created_at", flat=True)
        .first()
    )
