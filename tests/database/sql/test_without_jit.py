"""Reads over every partition of the runs are planned without JIT
(``runqueue.sql.without_jit``; docs/performance.md: with months of history
a run page's tree walk was compiled for ~400 ms to run in one): each
statement of a console page and of a ``/metrics`` scrape runs with ``jit``
off, the setting is the transaction's only, and the walk to a tree's root
is a function declared with it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

import runqueue
from runqueue.sql import execute, without_jit
from tests.admin_support import PASSWORD, staff, uncertain

# Transactions of their own: inside a test's transaction a SET LOCAL would
# last until the test ends, and nothing could show that it ends with the page.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _session_jit_on() -> Iterator[None]:
    """The session's jit on, whatever the server's default: the tests show
    that a page's statements ran with it off and that the page left it on."""
    connection.ensure_connection()
    connection.connection.execute("SET jit = on")
    yield
    connection.connection.execute("RESET jit")


def _jit() -> str:
    # The raw psycopg connection: not through Django's cursor, so not
    # through the execute wrapper that calls this.
    return connection.connection.execute("SELECT current_setting('jit')").fetchone()[0]


@contextmanager
def jit_of_each_statement() -> Iterator[list[tuple[str, str]]]:
    """(statement's first words, jit as it ran) for each statement that
    reads runqueue's tables."""
    seen: list[tuple[str, str]] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if "runqueue_" in sql and "set_config" not in sql:
            seen.append((" ".join(sql.split())[:60], _jit()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield seen


def test_a_run_page_and_a_list_read_without_jit() -> None:
    run, _tool = uncertain()
    staff("jit", "view_run")
    client = Client()
    assert client.login(username="jit", password=PASSWORD)
    session = _jit()
    assert session == "on"
    for url in (
        reverse("admin:runqueue_run_change", args=[run.id]),
        reverse("admin:runqueue_run_changelist"),
    ):
        with jit_of_each_statement() as seen:
            assert client.get(url).status_code == 200
        assert seen, url
        assert {jit for _sql, jit in seen} == {"off"}, seen
        assert _jit() == session  # the page's transaction only


def test_a_scrape_reads_without_jit() -> None:
    runqueue.submit(kind="test.echo", payload={})
    with jit_of_each_statement() as seen:
        assert Client().get("/metrics").status_code == 200
    assert len(seen) >= 3
    assert {jit for _sql, jit in seen} == {"off"}, seen
    assert _jit() == "on"


def test_a_post_keeps_its_own_transactions() -> None:
    """Forms and actions are not wrapped: they commit as they always did."""
    run, _tool = uncertain()
    staff("jitpost", "view_run", "cancel_run")
    client = Client()
    assert client.login(username="jitpost", password=PASSWORD)
    with jit_of_each_statement() as seen:
        client.post(
            reverse("admin:runqueue_run_changelist"),
            {"action": "cancel_runs", "_selected_action": [str(run.id)]},
        )
    assert seen
    assert {jit for _sql, jit in seen} == {"on"}


def test_the_tree_root_walk_is_declared_without_jit() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proconfig FROM pg_proc WHERE proname = 'runqueue_tree_root'"
            " AND pronamespace = current_schema()::regnamespace"
        )
        assert cursor.fetchone()[0] == ["jit=off"]
        parent = runqueue.submit(kind="test.echo", payload={}, session_id="s").run
        assert execute(cursor, "usage_root", {"run_id": parent.id}).fetchone() == (
            parent.id,
            "s",
        )
        assert execute(cursor, "usage_root", {"run_id": uuid.uuid4()}).fetchone() is None


def test_without_jit_is_a_transaction_of_its_own() -> None:
    with without_jit():
        assert _jit() == "off"
        assert connection.in_atomic_block
    assert _jit() == "on"
