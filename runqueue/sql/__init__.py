"""The raw SQL of runqueue, loaded once from queries.sql by name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection

_BLOCK = re.compile(r"^-- name: (?P<name>[a-z_]+) --$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a queries file into {name: statement}; names must be unique."""
    parts = _BLOCK.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        statement = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        queries[name] = statement.rstrip(";")
    return queries


@cache
def queries() -> dict[str, str]:
    return parse((Path(__file__).parent / "queries.sql").read_text())


def execute(cursor: Any, name: str, params: dict[str, Any]) -> Any:
    """Run the named statement on a Django or psycopg cursor."""
    cursor.execute(queries()[name], params)
    return cursor


@contextmanager
def prepared(name: str, params: dict[str, Any]) -> Iterator[psycopg.Cursor]:
    """Run a hot statement (claim, fences) as a server-side prepared statement.

    It runs on Django's connection, so inside or outside the caller's
    transaction exactly as a Django cursor would, with database errors
    mapped to Django's. Django's cursors bind parameters on the client, so
    the server plans every statement again; the worker's statements are
    the same thousands of times, and preparing them halves their cost.
    """
    # What Django's cursor() does first: the health check (once per request
    # cycle, i.e. per slot loop) and the connection itself.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(queries()[name], params, prepare=True)
            yield cursor
