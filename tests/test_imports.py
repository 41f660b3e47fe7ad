"""runqueue's modules import downward only: no module imports, at run time,
one that imports it back (no cycle, however long), and the layers the code
is read by keep their direction (settings below what they configure, the
lease writes below observability, the event stream beside the HTTP API).

Imports inside ``if TYPE_CHECKING:`` are left out: they name types for the
checker and run nothing. Imports inside functions count: they run.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

RUNQUEUE = Path(__file__).resolve().parent.parent / "runqueue"

#: (importer, imported): no module under the first may import one under the
#: second. Lower layers report upward through hooks registered from above
#: (runqueue.leases.base.observers, runqueue.conf.register_parser).
FORBIDDEN = [
    ("runqueue.conf", "runqueue.schedules"),
    ("runqueue.stream", "runqueue.api"),
    ("runqueue.leases", "runqueue.observability"),
]


def _name(path: Path) -> str:
    parts = path.relative_to(RUNQUEUE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _graph() -> dict[str, frozenset[str]]:
    """{module: the runqueue modules it imports at run time}."""
    paths = {_name(p): p for p in RUNQUEUE.rglob("*.py") if "migrations" not in p.parts}

    def module(dotted: str) -> str:
        while dotted not in paths:
            dotted = dotted.rpartition(".")[0]
        return dotted

    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        imported = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("runqueue"):
                assert node.module is not None
                for alias in node.names:
                    imported.add(module(f"{node.module}.{alias.name}"))
            elif isinstance(node, ast.Import):
                imported.update(
                    module(a.name) for a in node.names if a.name.startswith("runqueue")
                )
        graph[name] = frozenset(imported - {name})
    return graph


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_reading_sees_imports_inside_functions_but_not_type_only_ones() -> None:
    graph = _graph()
    assert "runqueue.models" in graph["runqueue.conf"]  # inside a function
    assert "runqueue.schedules.spec" not in graph["runqueue.conf"]  # TYPE_CHECKING only


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
