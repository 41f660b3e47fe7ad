"""Every named statement in ``runqueue/sql/queries.sql`` parses and plans on
the test database, and every name the code uses exists there; the class
functions agree with ``PriorityClass``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from runqueue.models import PRIORITY_MAX, PriorityClass
from runqueue.sql import parse, queries
from runqueue.sql.classes import functions

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


# -- The file's blocks ---------------------------------------------------------


def test_a_fragment_is_put_in_where_a_statement_includes_it() -> None:
    text = (
        "-- fragment: where_due --\n"
        "-- why\n"
        " WHERE due\n"
        "-- name: a --\n"
        "SELECT 1 FROM t\n"
        "-- include: where_due --\n"
        ";\n"
        "-- name: b --\n"
        "-- include: where_due --\n"
    )
    assert parse(text) == {"a": "SELECT 1 FROM t\n WHERE due", "b": "WHERE due"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("-- name: a --\nSELECT 1;\n-- name: a --\nSELECT 2;\n", "defined twice"),
        ("-- fragment: a --\nx\n-- name: a --\nSELECT 1;\n", "defined twice"),
        ("-- name: a --\n-- include: nope --\n", "which is no fragment"),
        ("-- fragment: f --\n-- include: f --\n-- name: a --\n-- include: f --\n", "itself"),
        ("-- fragment: f --\nx\n-- name: a --\nSELECT 1;\n", "no statement includes"),
    ],
)
def test_a_broken_file_fails_to_load(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse(text)


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


# -- The class of a priority ---------------------------------------------------

_CLASS_FUNCTION = re.compile(r"FUNCTION (?P<name>\w+)\(.*?\$\$(?P<body>.*?)\$\$", re.DOTALL)


@pytest.mark.django_db
def test_the_class_functions_agree_with_priority_class_for_every_priority() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p, runqueue_priority_class(p),"
            " runqueue_priority_class_low(runqueue_priority_class(p)),"
            " runqueue_priority_class_high(runqueue_priority_class(p))"
            " FROM generate_series(0, %s) AS p ORDER BY p",
            [PRIORITY_MAX],
        )
        rows = cursor.fetchall()
        cursor.execute("SELECT idx, low, high FROM runqueue_priority_classes()")
        classes = cursor.fetchall()
        cursor.execute(
            "SELECT runqueue_priority_class_low(%s), runqueue_priority_class_high(%s)",
            [len(PriorityClass), len(PriorityClass)],
        )
        beyond = cursor.fetchone()
    expected = [
        (p, PriorityClass.of(p).index, *PriorityClass.of(p).bounds)
        for p in range(PRIORITY_MAX + 1)
    ]
    assert rows == expected
    assert classes == [(c.index, *c.bounds) for c in PriorityClass]
    assert beyond == (None, None)


@pytest.mark.django_db
def test_the_class_functions_are_what_priority_class_renders() -> None:
    """The latest migration's text is ``runqueue.sql.classes.functions()``:
    a change to ``PriorityClass`` needs a migration that renders them again."""
    rendered = {m["name"]: m["body"] for m in _CLASS_FUNCTION.finditer(functions())}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, prosrc FROM pg_proc WHERE proname = ANY(%s)", [list(rendered)]
        )
        stored = dict(cursor.fetchall())
    assert stored == rendered


@pytest.mark.django_db
def test_the_class_functions_are_inlined() -> None:
    """The planner puts each function's body in place (LANGUAGE sql,
    IMMUTABLE, not STRICT, no SET): an index condition on a class's bounds
    stays one, and no function is called per row."""
    statements = [
        ("SELECT runqueue_priority_class(priority) FROM runqueue_run", []),
        (
            "SELECT 1 FROM runqueue_run WHERE priority"
            " BETWEEN runqueue_priority_class_low(%s) AND runqueue_priority_class_high(%s)",
            [1, 1],
        ),
        ("SELECT * FROM runqueue_priority_classes()", []),
    ]
    with connection.cursor() as cursor:
        for statement, params in statements:
            cursor.execute("EXPLAIN (VERBOSE, COSTS OFF) " + statement, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "runqueue_priority_class" not in plan, plan


@pytest.mark.django_db
def test_no_statement_writes_the_class_arithmetic_out() -> None:
    """The class of a priority has one SQL definition, the functions: no
    statement (nor the capped claim's function) divides a priority, scales
    a class index or names the highest priority."""
    arithmetic = re.compile(rf"priority\s*/|\b(cls|idx)\s*\*|\b{PRIORITY_MAX}\b")
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'runqueue_claim_capped'")
        (claim_capped,) = cursor.fetchone()
    texts = {**queries(), "runqueue_claim_capped": claim_capped}
    assert [name for name, text in texts.items() if arithmetic.search(text)] == []
