"""The database's clock: every schedule comparison reads it, never the
host's, so workers on hosts whose clocks differ agree on what is due."""

from __future__ import annotations

import datetime as dt

from django.db import connection

from runqueue.sql import execute


def db_now() -> dt.datetime:
    """The database's ``now()`` (its transaction's start, inside one)."""
    with connection.cursor() as cursor:
        return execute(cursor, "clock", {}).fetchone()[0]
