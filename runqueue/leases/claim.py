"""Claim: one statement, FOR UPDATE SKIP LOCKED, by priority then age."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from django.db import connection, transaction

from runqueue.conf import get_settings
from runqueue.leases.base import (
    ALL_CLASSES,
    Lease,
)
from runqueue.models import (
    PriorityClass,
    Run,
)
from runqueue.sql import prepared

# --- claim -----------------------------------------------------------------


def claim(
    owner: str,
    classes: Iterable[PriorityClass] = ALL_CLASSES,
    *,
    limit: int = 1,
    lease_seconds: float | None = None,
) -> list[Lease]:
    """Claim up to ``limit`` due runs from ``classes``, by priority then age."""
    classes = tuple(PriorityClass(c) for c in classes)
    if not classes:
        raise ValueError("claim needs at least one priority class")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    seconds = get_settings().LEASE_SECONDS if lease_seconds is None else lease_seconds
    params = {
        "owner": owner,
        "lease_seconds": float(seconds),
        "limit": limit,
        "min_priority": min(c.bounds[0] for c in classes),
        "max_priority": max(c.bounds[1] for c in classes),
        "class_indexes": sorted({int(c) // 10 for c in classes}),
    }
    if connection.in_atomic_block:
        with transaction.atomic(durable=True):  # raises: a claim is never nested
            runs = _claim_rows(params)
    else:
        # One statement (the event is in it): in autocommit, a transaction
        # of its own, without the round trips of BEGIN and COMMIT.
        runs = _claim_rows(params)
    return [Lease(run=run, owner=owner, lease_seconds=float(seconds)) for run in runs]


def _claim_rows(params: dict[str, Any]) -> list[Run]:
    with prepared("claim", params) as cursor:
        names = [column.name for column in cursor.description]
        rows = cursor.fetchall()
    return [_run_from_row(names, row) for row in rows]


@cache
def _run_loaders() -> dict[str, tuple[str, tuple[Callable[..., Any], ...]]]:
    """Per column of runqueue_run: its field's attname and the converters
    Django applies to values read from the database (JSON fields)."""
    loaders = {}
    for f in Run._meta.concrete_fields:
        col = f.get_col(Run._meta.db_table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        loaders[f.column] = (f.attname, tuple(converters))
    return loaders


def _run_from_row(names: list[str], row: tuple) -> Run:
    """A Run instance from a raw row of ``runqueue_run`` (what ``raw()`` does)."""
    loaders = _run_loaders()
    values = {}
    for name, value in zip(names, row, strict=True):
        attname, converters = loaders[name]
        for convert in converters:
            value = convert(value, None, connection)
        values[attname] = value
    return Run.from_db(
        connection.alias,
        [f.attname for f in Run._meta.concrete_fields],
        [values[f.attname] for f in Run._meta.concrete_fields],
    )


def claim_one(
    owner: str, classes: Iterable[PriorityClass] = ALL_CLASSES, **kwargs: Any
) -> Lease | None:
    """Claim the next due run from ``classes``, or None."""
    leases = claim(owner, classes, limit=1, **kwargs)
    return leases[0] if leases else None
