"""The worker's hot statements are prepared on the server by default
(Django's own connection settings turn every prepare off), and not at all
with RUNQUEUE["PREPARED_STATEMENTS"] False, for a pooler that cannot carry
them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connection

import runqueue
from runqueue import conf, leases
from runqueue.models import PriorityClass

pytestmark = pytest.mark.django_db(transaction=True)


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _claim_one() -> None:
    runqueue.submit(kind="test.echo", priority=PriorityClass.INTERACTIVE)
    held = leases.claim("w/test", [PriorityClass.INTERACTIVE], limit=1, lease_seconds=30)
    assert len(held) == 1


def test_the_claim_is_prepared_on_the_server_by_default() -> None:
    connection.close()  # a connection as Django opens it
    _claim_one()  # submit's statement and the claim's
    statements = _prepared_statements()
    assert any("SKIP LOCKED" in text for text in statements), statements
    _claim_one()
    assert len(_prepared_statements()) == len(statements)  # the same ones, not new ones


def test_django_queries_stay_unprepared(django_user_model) -> None:
    connection.close()
    _claim_one()
    before = len(_prepared_statements())
    for _ in range(10):
        django_user_model.objects.filter(username="nobody").exists()
    assert len(_prepared_statements()) == before


def test_nothing_is_prepared_when_turned_off(settings) -> None:
    settings.RUNQUEUE = {"PREPARED_STATEMENTS": False}
    connection.close()
    _claim_one()
    _claim_one()
    assert _prepared_statements() == []


@pytest.mark.parametrize("value", ["yes", 1])
def test_the_setting_is_a_bool_or_none(value: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="PREPARED_STATEMENTS"):
        conf.parse({"PREPARED_STATEMENTS": value})


def test_a_migration_under_a_prepared_claim_costs_one_failed_claim(raw_connect) -> None:
    """A column added while a worker holds the claim prepared changes the
    statement's result type: the next claim fails once, the one after
    prepares the new shape (a worker retries its claim)."""
    connection.close()
    _claim_one()
    raw_connect().execute("ALTER TABLE runqueue_run ADD COLUMN added_later integer")
    try:
        runqueue.submit(kind="test.echo", priority=PriorityClass.INTERACTIVE)
        claim = lambda: leases.claim(  # noqa: E731
            "w/test", [PriorityClass.INTERACTIVE], limit=1, lease_seconds=30
        )
        with pytest.raises(DatabaseError, match="cached plan"):
            claim()
        assert len(claim()) == 1
    finally:
        connection.close()
        raw_connect().execute("ALTER TABLE runqueue_run DROP COLUMN added_later")


def test_nothing_is_prepared_behind_a_transaction_pooler_that_cannot_carry_it(settings) -> None:
    settings.RUNQUEUE = {"POOLER": "transaction", "LISTEN_DATABASE": "default"}
    connection.close()
    _claim_one()
    _claim_one()
    assert _prepared_statements() == []


@pytest.mark.parametrize(
    ("raw", "prepares"),
    [
        ({}, True),
        ({"POOLER": "session"}, True),
        ({"POOLER": "transaction"}, False),
        ({"POOLER": "transaction", "POOLER_TRACKS_PREPARED": True}, True),
        ({"PREPARED_STATEMENTS": False}, False),
    ],
)
def test_what_prepares_by_default(raw: dict, prepares: bool) -> None:
    assert conf.parse(raw).prepares is prepares


@pytest.mark.parametrize("value", ["bouncer", "Transaction", 1])
def test_the_pooler_setting_names_a_mode(value: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="POOLER"):
        conf.parse({"POOLER": value})
