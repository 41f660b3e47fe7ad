"""Every named statement in ``runqueue/sql/queries.sql`` parses and plans on
the test database, and every name the code uses exists there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from runqueue.sql import queries

RUNQUEUE = Path(__file__).resolve().parent.parent / "runqueue"
_PARAM = re.compile(r"%\((\w+)\)s")
#: How the code names a statement: prepared("x", ...), execute(cursor, "x", ...).
_USE = re.compile(r"""(?:prepared|execute)\(\s*(?:cursor,\s*)?["']([a-z_]+)["']""")


def _names_used() -> set[str]:
    used: set[str] = set()
    for path in RUNQUEUE.rglob("*.py"):
        used.update(_USE.findall(path.read_text()))
    return used


def test_every_statement_the_code_names_exists() -> None:
    used = _names_used()
    assert used, "no use of a named statement found: the pattern is stale"
    assert used <= set(queries()), sorted(used - set(queries()))


def test_every_statement_is_used_somewhere() -> None:
    code = "\n".join(path.read_text() for path in RUNQUEUE.rglob("*.py"))
    unused = [name for name in queries() if f'"{name}"' not in code]
    assert unused == []


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(queries()))
def test_each_statement_parses_and_plans(name: str) -> None:
    """PREPARE makes the server parse, analyse and plan the statement with
    its parameters' types inferred, without running it."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    statement = _PARAM.sub(number, queries()[name]).replace("%%", "%")
    # EXPLAIN cannot be prepared: check the statement it explains.
    statement = re.sub(r"^EXPLAIN\s*(\([^)]*\))?\s*", "", statement)
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE runqueue_check_{name} AS {statement}")
        cursor.execute(f"DEALLOCATE runqueue_check_{name}")
