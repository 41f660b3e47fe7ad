"""A statement that only claims commits without waiting for the disk
(``synchronous_commit`` off for its own transaction); one that finishes runs
waits, and ``DURABLE_CLAIMS`` makes every claim wait. The setting is the
transaction's alone: nothing of it is left on the connection after.

The claim's statement is run inside a transaction here so the setting it
made can be read before the commit (the worker runs it alone, in
autocommit)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

import runqueue
from runqueue import leases
from runqueue.leases.claim import _statement
from runqueue.leases.outcomes import Succeeded

pytestmark = pytest.mark.django_db(transaction=True)


def _spec(limit: int) -> leases.ClaimSpec:
    return leases.claim_spec("w", leases.ALL_CLASSES, limit=limit, lease_seconds=30)


def _setting() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        return cursor.fetchone()[0]


def _claim_in_transaction(finishes=()) -> tuple[str, list[leases.Lease]]:
    """(synchronous_commit as the claim's transaction has it at its end, the leases)."""
    with transaction.atomic():
        _finished, claimed = _statement(finishes, _spec(1))
        return _setting(), claimed


def test_a_claim_alone_does_not_wait_for_the_disk_and_leaves_no_setting_behind() -> None:
    assert _setting() == "on"
    runqueue.submit(kind="k")
    inside, claimed = _claim_in_transaction()
    assert len(claimed) == 1
    assert inside == "off"
    assert _setting() == "on"  # the transaction's own: not the session's


def test_a_statement_with_finishes_waits_for_the_disk() -> None:
    runqueue.submit(kind="k", payload={"i": 1})
    runqueue.submit(kind="k", payload={"i": 2})
    (held,) = leases.claim("w", leases.ALL_CLASSES, limit=1, lease_seconds=30)
    inside, claimed = _claim_in_transaction([(held, Succeeded.of(None))])
    assert len(claimed) == 1
    assert inside == "on"


def test_durable_claims_wait_for_the_disk(settings) -> None:
    settings.RUNQUEUE = {"DURABLE_CLAIMS": True}
    runqueue.submit(kind="k")
    inside, claimed = _claim_in_transaction()
    assert len(claimed) == 1 and inside == "on"


def test_durable_claims_must_be_a_boolean(settings) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from runqueue.conf import get_settings

    settings.RUNQUEUE = {"DURABLE_CLAIMS": "yes"}
    with pytest.raises(ImproperlyConfigured, match="DURABLE_CLAIMS"):
        get_settings()
