"""Reads from a replica (``RUNQUEUE["READ_DATABASE"]``): which database a
console page, a scrape of ``/metrics`` or an API read reads from, and how
far behind the replica is.

A read goes to the replica only inside ``replica_reads()``, which the read
paths enter: the console's lists and dashboard, ``/metrics``, the API's
event, step and session reads. Everything else (workers, the fence,
submissions, actions, a run's own page, the run the API's ``Location``
names) reads the primary, where its own writes are. Inside the scope
``runqueue.reads.routing.ReadReplicaRouter`` sends runqueue's ORM reads to
``read_alias()``; raw statements take ``read_connection()``.
docs/decisions/schedules-webhooks.md, "Reads from a replica".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.http import HttpRequest, HttpResponseBase

from runqueue.conf import get_settings
from runqueue.sql import execute

logger = logging.getLogger("runqueue.reads")

#: A replica's lag is measured at most this often, per process and database.
LAG_CACHE_SECONDS = 1.0
#: A replica that could not be reached is asked again after this long:
#: meanwhile reads go to the primary without waiting on a connect timeout.
UNREACHABLE_SECONDS = 10.0
#: The header an API or /metrics answer read from a lagging replica carries.
LAG_HEADER = "Runqueue-Read-Lag"
#: Where a staff member's session keeps the WAL end of their last write.
WRITTEN_KEY = "runqueue.written_lsn"


@dataclass(frozen=True, slots=True)
class Replay:
    """What a replica said about itself."""

    standby: bool
    #: Seconds of the primary's commits not replayed yet; None: unknown.
    lag: float | None
    #: The WAL it has replayed up to (None: not a standby).
    replayed: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadSource:
    """Where one scope's reads go."""

    alias: str
    #: Read from READ_DATABASE (else the primary).
    replica: bool
    lag: float | None = 0.0
    #: Why the primary although READ_DATABASE is set ("" otherwise).
    fallback: str = ""

    @property
    def behind(self) -> bool:
        """Read from the replica at READ_LAG_WARNING_SECONDS behind or more
        (or an unknown lag): the answer says so."""
        if not self.replica:
            return False
        return self.lag is None or self.lag >= get_settings().READ_LAG_WARNING_SECONDS

    def lag_text(self) -> str:
        return "unknown" if self.lag is None else f"{self.lag:.1f}"

    def notice(self) -> str | None:
        """The console's line for a page read from a lagging replica."""
        if not self.behind:
            return None
        if self.lag is None:
            return "Read from a replica whose lag is unknown: recent changes may not show yet."
        return (
            f"Read from a replica {self.lag:.1f} s behind the primary: changes of the "
            f"last {self.lag:.1f} s may not show yet."
        )


_PRIMARY = ReadSource(alias=DEFAULT_DB_ALIAS, replica=False)
_current: ContextVar[ReadSource | None] = ContextVar("runqueue_read_source", default=None)
_measured: dict[str, tuple[Replay | None, float]] = {}
_lock = threading.Lock()


def read_alias() -> str:
    """The database reads go to now: the scope's, or the primary outside one."""
    source = _current.get()
    return DEFAULT_DB_ALIAS if source is None else source.alias


def read_connection() -> BaseDatabaseWrapper:
    """The Django connection a raw read statement takes (``read_alias()``)."""
    return connections[read_alias()]


@contextmanager
def bounded() -> Iterator[CursorWrapper]:
    """A cursor on the read connection, in a transaction where the planner
    walks indexes, in order, and stops at the LIMIT. With a LIMIT above its
    row estimate (per-class parameters, stale statistics) it would otherwise
    build a bitmap of every matching run, or read every queued run of a
    class and sort them to find the first few: reads that grow with the
    table. The scrape's and the dashboard's capped reads run in one."""
    connection = read_connection()  # the replica's in a read scope
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        execute(cursor, "bounded_reads", {})
        yield cursor


def current() -> ReadSource | None:
    """The scope's source; None outside ``replica_reads()``."""
    return _current.get()


@contextmanager
def replica_reads(written: int | None = None) -> Iterator[ReadSource]:
    """Runqueue's reads in this block go to READ_DATABASE, unless it is
    past READ_MAX_LAG_SECONDS, unreachable, or (``written``: the WAL end
    of the reader's own last write) has not replayed that write yet."""
    source = choose(written)
    token = _current.set(source)
    try:
        yield source
    finally:
        _current.reset(token)


@contextmanager
def for_request(request: HttpRequest) -> Iterator[ReadSource]:
    """``replica_reads`` for a staff member's page: after their own write
    (``remember_write``), the primary until the replica has replayed it."""
    written = written_lsn(request)
    with replica_reads(written) as source:
        if written is not None and source.replica:
            request.session.pop(WRITTEN_KEY, None)  # replayed: no longer needed
        yield source


def choose(written: int | None = None) -> ReadSource:
    """Where a read scope's reads go now (``replica_reads``)."""
    conf = get_settings()
    alias = conf.READ_DATABASE
    if alias is None or alias == DEFAULT_DB_ALIAS:
        return _PRIMARY
    replay = measure(alias)
    if replay is not None and written is not None and _before(replay, written):
        replay = measure(alias, fresh=True)
    if replay is None:
        return ReadSource(alias=DEFAULT_DB_ALIAS, replica=False, fallback="unreachable")
    if written is not None and _before(replay, written):
        return ReadSource(alias=DEFAULT_DB_ALIAS, replica=False, fallback="own write")
    limit = conf.READ_MAX_LAG_SECONDS
    if limit is not None and (replay.lag is None or replay.lag > limit):
        return ReadSource(alias=DEFAULT_DB_ALIAS, replica=False, lag=replay.lag, fallback="lag")
    return ReadSource(alias=alias, replica=True, lag=replay.lag)


def _before(replay: Replay, written: int) -> bool:
    return replay.standby and (replay.replayed is None or replay.replayed < written)


def measure(alias: str, *, fresh: bool = False) -> Replay | None:
    """How far behind ``alias`` is (None: unreachable), measured at most
    every LAG_CACHE_SECONDS unless ``fresh``."""
    with _lock:
        replay, at = _measured.get(alias, (None, -float("inf")))
    keep = LAG_CACHE_SECONDS if replay is not None else UNREACHABLE_SECONDS
    if not fresh and time.monotonic() - at < keep:
        return replay
    replay = _ask(alias)
    with _lock:
        _measured[alias] = (replay, time.monotonic())
    return replay


def forget() -> None:
    """Drop every measured lag (tests; a changed READ_DATABASE)."""
    with _lock:
        _measured.clear()


def _ask(alias: str) -> Replay | None:
    connection = connections[alias]
    try:
        with connection.cursor() as cursor:
            standby, lag, replayed = execute(cursor, "read_lag", {}).fetchone()
    except DatabaseError:
        logger.warning("Replica %s unreachable; reading from the primary", alias, exc_info=True)
        try:
            connection.close()
        except DatabaseError:
            pass  # already gone
        return None
    return Replay(standby=standby, lag=lag, replayed=parse_lsn(replayed))


def parse_lsn(text: str | None) -> int | None:
    """A WAL position (``"16/B374D848"``) as a number; None for None."""
    if not text:
        return None
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def remember_write(request: HttpRequest) -> None:
    """After a staff member's write on the console: their next pages read
    the primary until the replica has replayed it (``for_request``), so a
    list shown after an action shows what the action did."""
    session = getattr(request, "session", None)
    if get_settings().READ_DATABASE is None or session is None:
        return
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        session[WRITTEN_KEY] = execute(cursor, "wal_written", {}).fetchone()[0]


def written_lsn(request: HttpRequest) -> int | None:
    session = getattr(request, "session", None)
    return None if session is None else parse_lsn(session.get(WRITTEN_KEY))


def mark[R: HttpResponseBase](response: R, source: ReadSource) -> R:
    """The lag header on an answer read from a lagging replica."""
    if source.behind:
        response[LAG_HEADER] = source.lag_text()
    return response
