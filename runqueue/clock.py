"""The database's clock: every time runqueue writes or compares (leases,
schedules, worker liveness, tool records) is read from it, never from the
host's, so workers and web processes on hosts whose clocks differ agree on
what is due, who is live and in what order things happened. Writes use
``Now()`` in the statement; Python code that must hold the time reads
``db_now()``."""

from __future__ import annotations

import datetime as dt

from django.db import connection

from runqueue.sql import execute


def db_now() -> dt.datetime:
    """The database's ``now()`` (its transaction's start, inside one)."""
    with connection.cursor() as cursor:
        return execute(cursor, "clock", {}).fetchone()[0]
