"""Every named statement in ``runqueue/sql/*.sql`` parses and plans on
the test database, every name the code uses exists there and every block is
used; the class functions agree with ``PriorityClass``."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from django.db import connection

from runqueue.models import PRIORITY_MAX, PriorityClass
from runqueue.sql import MAX_STATEMENT_BYTES, load, parse, queries
from runqueue.sql.classes import functions
from tests.helpers import numbered

RUNQUEUE = Path(__file__).resolve().parents[3] / "runqueue"


# -- Which names the code runs ------------------------------------------------
#
# The code reads a statement as ``queries()[name]``; ``execute`` and
# ``prepared`` take the name as a parameter and pass it on, and so do
# functions around them (the fences). The reading below starts from
# ``queries()[...]`` and follows every parameter passed on that way, to the
# call sites that give the name as a string: a name in a variable assigned
# from strings counts each string. A name it cannot follow fails the test
# (rather than being missed).


@dataclass
class _Module:
    name: str
    tree: ast.Module
    #: Local name -> (module, name) for ``from x import y [as z]``, and
    #: local name -> (module, "") for ``import x [as z]``.
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)


def _modules() -> dict[str, _Module]:
    modules: dict[str, _Module] = {}
    for path in sorted(RUNQUEUE.rglob("*.py")):
        parts = path.relative_to(RUNQUEUE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = _Module(name, ast.parse(path.read_text(), str(path)))
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom):  # runqueue imports absolutely
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = (node.module or "", alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.partition(".")[0]
                    module.imports[local] = (alias.asname and alias.name or local, "")
        modules[name] = module
    return modules


def _callee(module: _Module, func: ast.expr, modules: dict[str, _Module]) -> tuple[str, str]:
    """The (module, function) a call's ``func`` names, as far as imports tell."""
    if isinstance(func, ast.Name):
        return module.imports.get(func.id, (module.name, func.id))
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        source, name = module.imports.get(func.value.id, ("", ""))
        qualified = f"{source}.{name}" if name else source
        if qualified in modules:
            return qualified, func.attr
    return "", ""


@dataclass
class _Uses:
    names: dict[str, list[str]] = field(default_factory=dict)  # name -> where
    unread: list[str] = field(default_factory=list)


def _positional(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in [*func.args.posonlyargs, *func.args.args]]


def _strings(expr: ast.expr) -> list[str] | None:
    """The strings an expression can be, or None when it is not only strings."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value]
    if isinstance(expr, ast.IfExp):
        body, orelse = _strings(expr.body), _strings(expr.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def _assigned(func: ast.FunctionDef | ast.AsyncFunctionDef, variable: str) -> list[str] | None:
    """The strings a local variable is assigned, or None if anything else."""
    found: list[str] = []
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=True))
            for name, value in pairs:
                if isinstance(name, ast.Name) and name.id == variable:
                    strings = _strings(value)
                    if strings is None:
                        return None
                    found += strings
    return found or None


_Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef


def _scopes(tree: ast.Module) -> list[_Scope]:
    return [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
    ]


def _own_nodes(scope: _Scope) -> list[ast.AST]:
    """The nodes of a scope's body, not those of functions or classes in it."""
    nodes: list[ast.AST] = []
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        nodes.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return nodes


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return _positional(function) + [a.arg for a in function.args.kwonlyargs]


@cache
def _names_used() -> _Uses:
    modules = _modules()
    calls = [
        (module, scope, node)
        for module in modules.values()
        for scope in _scopes(module.tree)
        for node in _own_nodes(scope)
        if isinstance(node, ast.Call | ast.Subscript)
    ]
    #: (module, function) -> its parameter that is a statement's name, and
    #: that parameter's position (None: keyword-only).
    sinks: dict[tuple[str, str], tuple[str, int | None]] = {}
    while True:
        uses, before = _Uses(), dict(sinks)
        for module, scope, node in calls:
            argument = _name_argument(module, node, sinks, modules)
            if argument is None:
                continue
            scope_name = getattr(scope, "name", "<module>")
            where = f"{module.name}.{scope_name}:{getattr(node, 'lineno', '?')}"
            strings = _strings(argument)
            function = None if isinstance(scope, ast.Module) else scope
            if strings is None and function and isinstance(argument, ast.Name):
                if argument.id in _parameters(function):
                    # A function that passes its parameter on: its callers name it.
                    positional = _positional(function)
                    index = positional.index(argument.id) if argument.id in positional else None
                    sinks[(module.name, function.name)] = (argument.id, index)
                    continue
                strings = _assigned(function, argument.id)
            if strings is None:
                uses.unread.append(f"{where}: {ast.unparse(argument)}")
                continue
            for name in strings:
                uses.names.setdefault(name, []).append(where)
        if sinks == before:
            return uses


def _name_argument(
    module: _Module,
    node: ast.AST,
    sinks: dict[tuple[str, str], tuple[str, int | None]],
    modules: dict[str, _Module],
) -> ast.expr | None:
    """The expression ``node`` passes as a statement's name, if it does."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
        if _callee(module, node.value.func, modules) == ("runqueue.sql", "queries"):
            return node.slice
        return None
    if not isinstance(node, ast.Call) or _callee(module, node.func, modules) not in sinks:
        return None
    parameter, index = sinks[_callee(module, node.func, modules)]
    for keyword in node.keywords:
        if keyword.arg == parameter:
            return keyword.value
    return node.args[index] if index is not None and index < len(node.args) else None


def test_the_reading_follows_a_name_to_where_the_code_gives_it() -> None:
    """Through ``execute`` (admin_tenants), ``prepared`` (create_runs), the
    fences (fence_renew) and a variable (the claim's two statements)."""
    names = set(_names_used().names)
    assert {"admin_tenants", "create_runs", "fence_renew", "finish_and_claim_capped"} <= names


def test_every_statement_the_code_names_exists() -> None:
    uses = _names_used()
    assert uses.unread == [], "statement names the test cannot follow"
    missing = {name: where for name, where in uses.names.items() if name not in queries()}
    assert missing == {}


def test_every_statement_is_used_somewhere() -> None:
    assert sorted(set(queries()) - set(_names_used().names)) == []


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
    assert parse(text) == {"a": "SELECT 1 FROM t\nWHERE due", "b": "WHERE due"}


def test_a_function_keeps_its_comments_and_an_include_takes_its_lines_indent() -> None:
    """A function's blocks: the text installed is the block as written
    (comments are part of a function's source), a fragment indented as the
    line that includes it; a statement of another file may include it too."""
    functions_text = (
        "-- fragment: ok --\n"
        "-- why\n"
        "AND a\n"
        "AND b\n"
        "-- function: fn --\n"
        "CREATE FUNCTION fn() AS $$\n"
        "  WHERE x\n"
        "    -- include: ok --\n"
        "$$;\n"
    )
    loaded = load("-- name: s --\nSELECT 1 WHERE x\n  -- include: ok --\n", functions_text)
    assert loaded.functions == {
        "fn": "CREATE FUNCTION fn() AS $$\n  WHERE x\n    -- why\n    AND a\n    AND b\n$$;\n"
    }
    assert loaded.statements == {"s": "SELECT 1 WHERE x\nAND a\nAND b"}


def test_every_statement_fits_psycopgs_statement_cache() -> None:
    """psycopg converts a query to the server's form once and caches it
    only for texts up to a length; a longer hot statement (the finish and
    claim) is converted on every call. A statement is sent unindented."""
    from psycopg import _queries

    assert MAX_STATEMENT_BYTES == _queries.MAX_CACHED_STATEMENT_LENGTH
    too_long = {
        name: len(text) for name, text in queries().items() if len(text) > MAX_STATEMENT_BYTES
    }
    assert too_long == {}
    assert not any(
        line != line.strip() for text in queries().values() for line in text.splitlines()
    )


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
    """PREPARE makes the server parse and analyse the statement with its
    parameters' types inferred; EXPLAIN EXECUTE with every parameter NULL
    (of those types) plans it. Neither runs it."""
    statement, names = numbered(name)
    # EXPLAIN cannot be prepared: check the statement it explains.
    statement = re.sub(r"^EXPLAIN\s*(\([^)]*\))?\s*", "", statement)
    nulls = f"({', '.join(['NULL'] * len(names))})" if names else ""
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE runqueue_check_{name} AS {statement}")
        try:
            cursor.execute(f"EXPLAIN EXECUTE runqueue_check_{name}{nulls}")
            assert cursor.fetchall()
        finally:
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
    """The installed class functions (fn_classes.sql's, as migrated) are what
    ``runqueue.sql.classes.functions()`` renders: a change to
    ``PriorityClass`` needs fn_classes.sql and a migration to say it."""
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
