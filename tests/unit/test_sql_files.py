"""runqueue/sql/ is files by owner, each short enough to read through
(runqueue/sql/__init__.py): every file under 400 lines, every name defined
once across them, and ``python -m runqueue.sql`` shows what is loaded."""

from __future__ import annotations

import pytest

from runqueue.sql import defined, files, functions, load, queries
from runqueue.sql.__main__ import main, render, render_list

#: The line budget of a file, and the files allowed over it (a single
#: function bigger than the budget may stand alone): none today.
MAX_LINES = 400
OVER_BUDGET: frozenset[str] = frozenset()


def test_every_sql_file_is_under_400_lines() -> None:
    sizes = {path.name: path.read_text().count("\n") for path in files()}
    assert sizes, "no SQL files found"
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert set(over) <= OVER_BUDGET, over


def test_every_file_defines_something_and_every_name_is_loaded() -> None:
    """Each file has blocks; every statement and function of the files is
    in queries() or functions(), and nothing else is."""
    blocks = defined()
    assert all(blocks.values()), [file for file, names in blocks.items() if not names]
    names = [(kind, name) for file_blocks in blocks.values() for kind, name in file_blocks]
    assert sorted(n for k, n in names if k == "name") == sorted(queries())
    assert sorted(n for k, n in names if k == "function") == sorted(functions())


def test_a_name_defined_in_two_files_is_refused() -> None:
    """Fragments are shared across files, so a name must mean one block
    wherever it is defined: a second definition, in the same file or
    another, fails the load and names both files."""
    first = "-- fragment: f --\nx\n-- name: a --\n-- include: f --\n"
    for second in ("-- name: a --\nSELECT 2\n", "-- fragment: f --\ny\n"):
        with pytest.raises(ValueError, match=r"defined twice \(in one\.sql and in two\.sql\)"):
            load(first, second, origins=["one.sql", "two.sql"])
    with pytest.raises(ValueError, match="defined twice"):
        load("-- function: a --\nCREATE FUNCTION a();\n", "-- name: a --\nSELECT 1\n")


def test_a_fragment_of_one_file_is_included_in_another() -> None:
    loaded = load(
        "-- fragment: f --\n-- why\nWHERE x\n", "-- name: a --\nSELECT 1\n-- include: f --\n"
    )
    assert loaded.statements == {"a": "SELECT 1\nWHERE x"}


def test_show_prints_the_statement_or_function_as_loaded(capsys) -> None:
    """``show NAME`` prints exactly what is sent (a statement: fragments put
    in, no comment lines) or installed (a function)."""
    for name in ("finish_and_claim", "claim_capped", "cancel"):
        assert main(["show", name]) == 0
        assert capsys.readouterr().out == queries()[name] + "\n"
    assert main(["show", "runqueue_claim_capped"]) == 0
    assert capsys.readouterr().out == functions()["runqueue_claim_capped"]
    for name in queries():
        assert render(name).rstrip("\n") == queries()[name]
    assert "-- include:" not in render("finish_and_claim")


def test_show_refuses_a_fragment_or_an_unknown_name(capsys) -> None:
    assert main(["show", "claimable"]) == 1
    assert "fragment" in capsys.readouterr().err
    assert main(["show", "no_such_statement"]) == 1
    assert "no such name" in capsys.readouterr().err


def test_list_names_each_block_under_its_file(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert out == render_list()
    lines = out.splitlines()
    for path in files():
        assert path.name in lines
    assert lines[lines.index("claim.sql") + 1 :].count("  name     claim") == 1
    assert "  function runqueue_claim_capped" in lines
