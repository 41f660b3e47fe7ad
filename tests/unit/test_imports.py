"""runqueue's modules import downward only: no module imports one that
imports it back (no cycle, however long), and the layers the code is read
by keep their direction (settings below what they configure, the lease
writes below observability, the event stream beside the HTTP API, the admin
and the HTTP API beside each other).

Every import counts: inside functions (they run) and inside
``if TYPE_CHECKING:`` too (they run nothing, but a type named upward ties
the lower module to the upper one all the same).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

RUNQUEUE = Path(__file__).resolve().parents[2] / "runqueue"

#: (importer, imported): no module under the first may import one under the
#: second. Lower layers report upward through hooks registered from above
#: (runqueue.leases.base.observers, runqueue.conf.register_parser); what
#: the admin and the API share lives below both (runqueue.tokens).
FORBIDDEN = [
    ("runqueue.conf", "runqueue.schedules"),
    ("runqueue.stream", "runqueue.api"),
    ("runqueue.leases", "runqueue.observability"),
    ("runqueue.admin", "runqueue.api"),
    ("runqueue.api", "runqueue.admin"),
    # The agent SDKs' adapters are optional: nothing of the core imports them.
    ("runqueue.leases", "runqueue.contrib"),
    ("runqueue.runtime", "runqueue.contrib"),
    ("runqueue.api", "runqueue.contrib"),
    ("runqueue.admin", "runqueue.contrib"),
    ("runqueue.worker", "runqueue.contrib"),
]


def _name(path: Path) -> str:
    parts = path.relative_to(RUNQUEUE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: Callable[[str], str]) -> set[str]:
    """The runqueue modules ``source`` imports anywhere (``module`` maps a
    dotted name to the module that defines it)."""
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("runqueue"):
            assert node.module is not None
            for alias in node.names:
                imported.add(module(f"{node.module}.{alias.name}"))
        elif isinstance(node, ast.Import):
            imported.update(module(a.name) for a in node.names if a.name.startswith("runqueue"))
    return imported


@cache
def _paths() -> dict[str, Path]:
    return {_name(p): p for p in RUNQUEUE.rglob("*.py") if "migrations" not in p.parts}


def _module(dotted: str) -> str:
    while dotted not in _paths():
        dotted = dotted.rpartition(".")[0]
    return dotted


@cache
def _graph() -> dict[str, frozenset[str]]:
    """{module: the runqueue modules it imports, at run time or for types}."""
    return {
        name: frozenset(_imports(path.read_text(), _module) - {name})
        for name, path in _paths().items()
    }


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_reading_sees_imports_inside_functions_and_type_only_ones() -> None:
    source = """
from typing import TYPE_CHECKING
import psycopg
from runqueue.conf import get_settings
if TYPE_CHECKING:
    from runqueue.models import Run
def f():
    import runqueue.leases.claim
"""
    assert _imports(source, _module) == {
        "runqueue.conf",  # at the top, the package defining the name
        "runqueue.models",  # for types only
        "runqueue.leases.claim",  # inside a function
    }


@pytest.mark.parametrize(("importer", "imported"), FORBIDDEN)
def test_no_upward_import(importer: str, imported: str) -> None:
    found = sorted(
        (name, target)
        for name, targets in _graph().items()
        if _under(name, importer)
        for target in targets
        if _under(target, imported)
    )
    assert found == []


def test_no_import_cycle() -> None:
    """Tarjan's strongly connected components of the import graph: each
    must be one module."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []
