"""The database functions runqueue installs are the text of
``runqueue/sql/fn_*.sql``: the migrated database holds exactly the
file's functions, and what a run must be to be claimed is written once."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from runqueue.sql import functions, queries, sources

SCRATCH = "runqueue_function_source"

_DEFINITIONS = """
SELECT p.proname, pg_get_functiondef(p.oid)
  FROM pg_proc p
 WHERE p.pronamespace = %s::regnamespace AND p.proname LIKE 'runqueue%%'
 ORDER BY p.proname, p.oid
"""


def _definitions(cursor, schema: str) -> list[tuple[str, str]]:
    """Each runqueue function of ``schema`` as PostgreSQL prints it, with the
    schema's name taken out (so two schemas' texts compare)."""
    cursor.execute(_DEFINITIONS, [schema])
    return [(name, text.replace(f"{schema}.", "", 1)) for name, text in cursor.fetchall()]


@pytest.mark.django_db
def test_the_migrated_database_has_exactly_the_files_functions() -> None:
    """The file's statements, run in a scratch schema, give the same
    definitions (``pg_get_functiondef``: signature, options, body) as the
    migrations gave the test database; and no other runqueue function is
    installed. A change to a function's file without a migration that installs
    it (or the reverse) fails here."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        (schema,) = cursor.fetchone()
        migrated = _definitions(cursor, schema)
        with transaction.atomic():
            cursor.execute(f"CREATE SCHEMA {SCRATCH}")
            cursor.execute(f"SET LOCAL search_path = {SCRATCH}, {schema}")
            for text in functions().values():
                cursor.execute(text)
            from_file = _definitions(cursor, SCRATCH)
            transaction.set_rollback(True)
    assert [name for name, _ in from_file] == sorted(functions())
    assert dict(migrated) == dict(from_file)
    assert len(migrated) == len(from_file)


def test_what_is_claimable_is_written_once() -> None:
    """The rule's conditions appear once in the SQL sources (the fragments
    of fn_claim.sql), and both claims and the capped walk's three reads
    include them."""
    for condition in (
        "q.attempts < q.max_attempts",
        "q.scheduled_for <= now()",
        "FROM runqueue_paused_kind p",
    ):
        assert sources().count(condition) == 1, condition
    capped = functions()["runqueue_claim_capped"]
    assert capped.count("q.attempts < q.max_attempts") == 3
    assert capped.count("FROM runqueue_paused_kind p") == 2
    for name in ("finish_and_claim", "finish_and_claim_capped", "claim", "claim_capped"):
        # The capped statements' claim is the function's; a finish is shared.
        expected = 0 if name.endswith("_capped") else 1
        assert queries()[name].count("FROM runqueue_paused_kind p") == expected, name
