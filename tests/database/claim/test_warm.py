"""A worker's connection is warmed before it claims (``leases.warm_connection``):
a run of runqueue's own kind is inserted, claimed and finished through the
claim's statements in a transaction rolled back, so nothing of it stays."""

from __future__ import annotations

import pytest
from django.db import connection

import runqueue
from runqueue import db, leases
from runqueue.models import EventLog, Run, RunStatus


def _sequence() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT last_value FROM runqueue_run_event_id_seq")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_warming_claims_and_finishes_a_run_of_its_own_and_leaves_nothing() -> None:
    queued = runqueue.submit(kind="test.echo", payload={}).run
    before = (Run.objects.count(), EventLog.objects.count(), _sequence())
    with db.connect() as listener:
        listener.execute("LISTEN runqueue")
        leases.warm_connection(leases.claim_spec("w", leases.ALL_CLASSES, limit=1))
        # A marker sent after it: whatever the warm-up sent arrives before it.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify('runqueue', 'marker')")
        heard = []
        for note in listener.notifies(timeout=10):
            if note.payload == "marker":
                break
            heard.append(note.payload)
    # The statements ran (their events took ids), and were rolled back.
    assert _sequence() > before[2]
    assert (Run.objects.count(), EventLog.objects.count()) == before[:2]
    assert not Run.objects.filter(kind=leases.WARM_KIND).exists()
    assert heard == []
    # The user's run was not touched: still queued, claimable as before.
    assert Run.objects.get(id=queued.id).status == RunStatus.QUEUED
    lease = leases.claim_one("w", leases.ALL_CLASSES)
    assert lease is not None and lease.run_id == queued.id
