"""psycopg connections of runqueue's own, opened from Django's settings,
what a database error says under Django's wrapper, and the database's clock.

For what must not share Django's per-thread connection: a LISTEN that
lives as long as the process, a ledger written outside a worker's
transactions, a test's second session holding locks.

The clock: every time runqueue writes or compares (leases, schedules,
worker liveness, tool records) is read from the database, never from the
host's, so workers and web processes on hosts whose clocks differ agree on
what is due, who is live and in what order things happened. Writes use
``Now()`` in the statement; Python code that must hold the time reads
``db_now()``.
"""

from __future__ import annotations

import datetime as dt

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db import InterfaceError as DjangoInterfaceError
from django.db import InternalError as DjangoInternalError
from django.db import OperationalError as DjangoOperationalError
from django.db.models import QuerySet

from runqueue.sql import execute


def listen_alias() -> str:
    """The DATABASES alias a LISTEN connects to: RUNQUEUE["LISTEN_DATABASE"],
    or the default database. A LISTEN belongs to its server session, so it
    needs a direct connection, never one through a transaction pooler."""
    from runqueue.conf import get_settings

    return get_settings().LISTEN_DATABASE or DEFAULT_DB_ALIAS


def connect(
    alias: str = DEFAULT_DB_ALIAS, *, autocommit: bool = True, **kwargs: str | int | None
) -> psycopg.Connection:
    """A new connection to the database ``alias`` names, as Django would
    open it (same server, database, user and OPTIONS), but plain psycopg:
    default cursors and adapters, autocommit unless told otherwise.
    ``kwargs`` add or override connection parameters (``connect_timeout``)."""
    params = connections[alias].get_connection_params()
    # Django's cursor class and adapters serve its ORM, not raw callers.
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**(params | kwargs), autocommit=autocommit)


# Django wraps psycopg's errors in its own (DatabaseError, IntegrityError...)
# with psycopg's as __cause__; a psycopg error raised directly is its own.


def _psycopg_error(exc: BaseException) -> BaseException:
    return exc if isinstance(exc, psycopg.Error) else (exc.__cause__ or exc)


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (``"40001"``), or None."""
    return getattr(_psycopg_error(exc), "sqlstate", None)


#: SQLSTATEs that say "this server cannot serve us now", not "this statement
#: is wrong": a server that turned read-only (a primary demoted to a standby
#: without closing its sockets answers 25006 to every write), an
#: administrator's or a crash's shutdown, a server starting up, a session
#: the server ended for sitting idle in its transaction or too long in one
#: (25P03, 25P04: the fence's idle limit ends a frozen worker's transaction
#: so its row locks go; the worker, woken, has lost it) or idle (57P05), and
#: the connection exceptions of class 08.
RECONNECT_SQLSTATES = frozenset({"25006", "25P03", "25P04", "57P01", "57P02", "57P03", "57P05"})


def connection_lost(exc: BaseException) -> bool:
    """True if ``exc`` means the connection is gone or points at a server
    that cannot take writes now: close it and reconnect (a multi-host URL
    with ``target_session_attrs=read-write``, or a proxy, then reaches the
    new primary). Never a handler's or a run's failure."""
    if isinstance(exc, DjangoInterfaceError | psycopg.InterfaceError):
        return True
    state = sqlstate(exc)
    if state is None:
        # No SQLSTATE: the client lost the server (a closed socket, a
        # refused or timed-out connect), or lost track of the protocol
        # (InternalError: a transaction pooler whose server connection was
        # ended under a client answers its COMMIT twice).
        return isinstance(
            exc,
            DjangoOperationalError
            | psycopg.OperationalError
            | DjangoInternalError
            | psycopg.InternalError,
        )
    return state in RECONNECT_SQLSTATES or state.startswith("08")


def constraint_name(exc: BaseException) -> str | None:
    """The constraint a database error names (a unique violation's), or None."""
    diag = getattr(_psycopg_error(exc), "diag", None)
    return getattr(diag, "constraint_name", None)


def capped_count(queryset: QuerySet, cap: int, *order: str) -> int:
    """How many rows, counting at most ``cap + 1``: COUNT over a LIMITed
    subquery, so the scan stops there. No ordering by default (it does not
    change a count and costs a sort); ``order`` names an index's columns
    where the planner should walk that index rather than scan the table
    for the first ``cap`` matches."""
    return queryset.order_by(*order).values("pk")[: cap + 1].count()


def db_now() -> dt.datetime:
    """The database's ``now()`` (its transaction's start, inside one)."""
    with connection.cursor() as cursor:
        return execute(cursor, "clock", {}).fetchone()[0]
