"""Helpers for tests that race real threads and connections."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.db import connection, connections

from runqueue import leases
from runqueue.models import EventLog, PriorityClass
from tests.pooling import POOLER

DEADLINE = 30.0


#: What a test's own stand-in for a statement that moves a running run out
#: of running must set too: a row holds its claim only while running
#: (runqueue_run_claim_held; the real statements write the claim out).
CLAIM_CLEARED = "claim_event_id = NULL, claimed_at = NULL, claim_wait_ms = NULL"


def wait_until(predicate: Callable[[], Any], *, timeout: float = DEADLINE, what: str = "") -> Any:
    """Poll ``predicate`` until it is truthy or the deadline passes."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.005)


def claimed(
    owner: str = "w",
    classes: Iterable[PriorityClass] = leases.ALL_CLASSES,
    *,
    lease_seconds: float | None = None,
    run_id: Any = None,
) -> leases.Lease:
    """The next due run, claimed (``leases.claim_one``): the test fails if
    none was, or, given ``run_id``, if another was."""
    lease = leases.claim_one(owner, classes, lease_seconds=lease_seconds)
    assert lease is not None
    if run_id is not None:
        assert lease.run_id == run_id
    return lease


class Worker(threading.Thread):
    """Run ``fn`` in a thread with its own Django connection; keep result or error."""

    def __init__(self, fn: Callable[[], Any], name: str = "worker") -> None:
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.backend_pid: int | None = None
        self.started_fn = threading.Event()

    def run(self) -> None:
        try:
            connection.ensure_connection()
            # Through a transaction pooler the thread has no backend of its
            # own (each transaction may get another): None, see is_blocked.
            self.backend_pid = None if POOLER else connection.connection.info.backend_pid
            self.started_fn.set()
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
        finally:
            connections.close_all()

    def outcome(self, timeout: float = DEADLINE) -> Any:
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def is_blocked(backend_pid: int | None) -> bool:
    """True while that backend waits on a lock held by another. None (a
    thread behind a transaction pooler, whose statement runs on whichever
    server connection the pooler lends it): while any backend of this
    database waits on one; the racing tests have one writer that can."""
    with connection.cursor() as cursor:
        if backend_pid is None:
            cursor.execute(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()"
                " AND cardinality(pg_blocking_pids(pid)) > 0)"
            )
        else:
            cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [backend_pid])
        return cursor.fetchone()[0]


def event_types(run_id: Any, epoch: int | None = None) -> list[str]:
    qs = EventLog.objects.filter(run_id=run_id).order_by("id")
    if epoch is not None:
        qs = qs.filter(lease_epoch=epoch)
    return list(qs.values_list("type", flat=True))


def expire_lease(run_id: Any) -> None:
    """Move a lease's expiry into the past on the database clock (test-only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            [run_id],
        )


def numbered(name: str) -> tuple[str, list[str]]:
    """The named statement as PREPARE takes it: its ``%(name)s`` parameters
    numbered ``$1``, ``$2``, ... in order of first use, and their names."""
    from runqueue.sql import queries

    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, queries()[name]).replace("%%", "%"), names
