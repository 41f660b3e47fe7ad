"""The raw SQL of runqueue, loaded once by name: the statements and the
database functions of the ``*.sql`` files beside this module, each file
holding what one part of runqueue owns (``claim.sql``, ``finish.sql``,
``waits.sql``, ...; the functions in ``fn_*.sql``), each under about 400
lines (tests/unit/test_sql_files.py). ``python -m runqueue.sql list``
names every statement and function by file, ``python -m runqueue.sql show
NAME`` prints one with its fragments put in.

Each file is a list of blocks, each starting with a marker line:

- ``-- name: NAME --`` starts a statement, which callers run by its name
  (``execute``, ``prepared``);
- ``-- function: NAME --`` starts a function's ``CREATE OR REPLACE``
  statement, the text migrations install a frozen copy of;
- ``-- fragment: NAME --`` starts SQL that several statements or functions
  share and nobody runs alone (the fenced finishes of ``finish_and_claim``
  and ``finish_and_claim_capped``; what a run must be to be claimed, in
  both claims and in ``runqueue_claim_capped``).

A line ``-- include: NAME --`` in a statement, a function or a fragment
stands for that fragment's text, indented as the line is, put in when the
files are loaded: every statement is still one text, sent in one round trip
(and prepared as one statement), and the names callers use are the
statements' names. A fragment of any file may be included in any other. A
name defined twice (in one file or in two), an include of no fragment, a
fragment that includes itself and a fragment nothing includes are errors at
load. A statement's comment lines are not sent; a function keeps its own
(those inside its body are part of what the database stores). What comes
before a file's first block says what the file owns and is not loaded.

Every lease and schedule comparison uses the database clock, now(). The
class of a priority is ``runqueue_priority_class`` and its siblings
(``fn_classes.sql``), never arithmetic in a statement. What a run must be
to be claimed is written once, in the fragments ``due`` and ``claimable``
(``fn_claim.sql``; on a run aliased q, each line an AND, so an include
follows a first condition): the plain claim and ``runqueue_claim_capped``
include them. So are the resume of a waiting run (``resume``), the active
and the live statuses (``active_statuses``, ``live_statuses``;
runqueue.models) and the give-back of a lease (``give_back``);
tests/unit/test_sql_fragments.py checks that none is written out anywhere
else.

A migration is history, so it holds a frozen copy of the functions' text,
not a call (the baseline, 0001_squashed_0034_schedules_api, all of them
once). To change a function (or a fragment one includes), edit it in its
file and add a migration that runs the new text, pasted in: a function the
statements call changes under a new name (``runqueue_claim_capped_v2``, the
statements switched to it, the old name kept for the previous release's
workers until a later migration drops it); one only the database calls (a
trigger's, a helper of other functions) is replaced in place; no migration
imports another (docs/decisions/project.md, "Migrations and database
functions"). tests/database/sql/test_functions.py checks that the migrated
database's functions are exactly the files'.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from runqueue.conf import get_settings
from runqueue.types import Params

_BLOCK = re.compile(r"^-- (?P<kind>name|function|fragment): (?P<name>[a-z_]+) --$", re.MULTILINE)
_INCLUDE = re.compile(r"^(?P<indent>[ \t]*)-- include: (?P<name>[a-z_]+) --[ \t]*$", re.MULTILINE)
_HERE = Path(__file__).parent
#: psycopg prepares a statement executed this many times: never, in effect;
#: ``prepared`` asks for its statements with ``prepare=True``.
_ONLY_WHEN_ASKED = 2**31 - 1
#: psycopg caches a query's conversion to the server's form only for texts
#: up to this length (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``).
MAX_STATEMENT_BYTES = 4096


@dataclass(frozen=True)
class Loaded:
    """What a set of SQL files defines, fragments put in."""

    #: {name: statement as sent} (no comment lines, no final semicolon).
    statements: dict[str, str]
    #: {name: the function's CREATE OR REPLACE statement, comments kept}.
    functions: dict[str, str]


def load(*texts: str, origins: Sequence[str] = ()) -> Loaded:
    """Split SQL files into statements and functions, fragments included.
    ``origins``: the files' names, for the errors."""
    blocks: dict[str, dict[str, str]] = {"name": {}, "function": {}, "fragment": {}}
    where: dict[str, str] = {}
    for index, text in enumerate(texts):
        origin = origins[index] if index < len(origins) else f"text {index + 1}"
        for kind, name, body in _blocks(text):
            if name in where:
                raise ValueError(
                    f"query {name!r} is defined twice (in {where[name]} and in {origin})"
                )
            where[name] = origin
            blocks[kind][name] = body
    fragments = blocks["fragment"]
    included: set[str] = set()

    def expand(body: str, within: tuple[str, ...]) -> str:
        def include(match: re.Match[str]) -> str:
            name = match.group("name")
            if name not in fragments:
                raise ValueError(f"{within[-1]!r} includes {name!r}, which is no fragment")
            if name in within:
                raise ValueError(f"fragment {name!r} includes itself")
            included.add(name)
            text = textwrap.dedent(expand(fragments[name].strip("\n"), (*within, name)))
            return textwrap.indent(text, match.group("indent"))

        return _INCLUDE.sub(include, body)

    loaded = Loaded(
        statements={
            name: _statement(expand(body, (name,))) for name, body in blocks["name"].items()
        },
        functions={
            name: expand(body, (name,)).strip() + "\n" for name, body in blocks["function"].items()
        },
    )
    if unused := sorted(set(fragments) - included):
        raise ValueError(f"no statement includes the fragments {unused}")
    return loaded


def _blocks(text: str) -> Iterator[tuple[str, str, str]]:
    """A file's blocks as (kind, name, body), in order."""
    parts = _BLOCK.split(text)
    yield from zip(parts[1::3], parts[2::3], parts[3::3], strict=True)


def parse(text: str) -> dict[str, str]:
    """Split a queries file into {name: statement}, fragments included."""
    return load(text).statements


def _statement(body: str) -> str:
    """The text sent to the server: no comment lines, no indentation, no
    final semicolon. Short enough for psycopg's statement cache (it keeps
    the server-side form of texts up to ``MAX_STATEMENT_BYTES``; a longer
    one is converted again on every call, ~30 µs a finish on the hot path)."""
    stripped = (line.strip() for line in body.strip().splitlines())
    lines = (line for line in stripped if line and not line.startswith("--"))
    return "\n".join(lines).rstrip(";").rstrip()


def files() -> list[Path]:
    """The SQL files, in the order they are loaded (by name)."""
    return sorted(_HERE.glob("*.sql"))


def sources() -> str:
    """Every SQL file's text as written, in load order, one after another:
    what a check of the sources (a rule written once) reads."""
    return "".join(path.read_text() for path in files())


def defined() -> dict[str, list[tuple[str, str]]]:
    """{file name: [(kind, name), ...]}: each file's blocks, in order (kind
    ``name``, ``function`` or ``fragment``)."""
    return {
        path.name: [(kind, name) for kind, name, _ in _blocks(path.read_text())]
        for path in files()
    }


@cache
def _loaded() -> Loaded:
    paths = files()
    return load(*(path.read_text() for path in paths), origins=[path.name for path in paths])


def queries() -> dict[str, str]:
    """The statements by name, as sent."""
    return _loaded().statements


def functions() -> dict[str, str]:
    """The functions by name: each its ``CREATE OR REPLACE`` statement, as
    the latest migration installs it."""
    return _loaded().functions


def functions_sql() -> str:
    """Every function in one text (in load order: a LANGUAGE sql function
    after those it calls, in its own file): what the migrations from 0006 to
    0033 pasted, frozen, to change one of them (a later migration pastes the
    texts it installs, ``functions()[name]``)."""
    return "\n".join(functions().values())


def execute[C: (CursorWrapper, psycopg.Cursor)](cursor: C, name: str, params: Params) -> C:
    """Run the named statement on a Django or psycopg cursor; returns it."""
    # django-stubs lists the parameter types Django's own backends adapt;
    # psycopg adapts more (Jsonb, arrays of UUIDs), and these reach it as is.
    cursor.execute(queries()[name], params)  # type: ignore[arg-type]
    return cursor


@contextmanager
def prepared(name: str, params: Params) -> Iterator[psycopg.Cursor]:
    """Run a hot statement (claim, fences) as a server-side prepared statement.

    It runs on Django's connection, so inside or outside the caller's
    transaction exactly as a Django cursor would, with database errors
    mapped to Django's. Django's cursors bind parameters on the client, so
    the server plans every statement again; the worker's statements are
    the same thousands of times, and a prepared one skips the planning (on
    the partitioned runs table, most of an idle claim's server time).
    Django opens its connections with psycopg's ``prepare_threshold`` None,
    which turns every prepare off, ``prepare=True`` included; unless
    prepares are off (``Settings.prepares``: a transaction pooler that
    cannot carry them, or ``PREPARED_STATEMENTS`` False), the threshold is
    set so high that only these statements, which ask, are prepared:
    Django's own queries are left as they were.
    """
    raw, prepare = _raw()
    with connection.wrap_database_errors:
        with psycopg.Cursor(raw) as cursor:
            try:
                cursor.execute(queries()[name], params, prepare=prepare)
            except psycopg.errors.FeatureNotSupported:
                # "cached plan must not change result type": a migration
                # changed a table under a prepared statement. Outside a
                # transaction nothing rolls back to make psycopg forget its
                # statements, so every retry would fail alike: DEALLOCATE ALL
                # (psycopg forgets them on seeing it) and the caller's retry
                # prepares the new shape.
                if not connection.in_atomic_block:
                    raw.execute("DEALLOCATE ALL")
                raise
            yield cursor


def _raw() -> tuple[psycopg.Connection, bool]:
    """Django's psycopg connection, as its cursor() would find it (the
    health check, once per request cycle, i.e. per slot loop, and the
    connection itself), and whether statements that ask are prepared."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    prepare = get_settings().prepares
    if prepare and raw.prepare_threshold is None:
        raw.prepare_threshold = _ONLY_WHEN_ASKED
    return raw, prepare


@contextmanager
def pipelined() -> Iterator[Callable[[str, Params], psycopg.Cursor]]:
    """Send named statements without waiting for each one's result (psycopg's
    pipeline mode): the server runs one while this process makes the next.
    Inside the caller's transaction only (``submit_many``'s chunks: all or
    nothing); each sent statement's cursor has its rows once the block has
    ended, and an error of any of them is raised there, mapped to Django's.
    Prepared as ``prepared`` prepares."""
    if not connection.in_atomic_block:
        raise RuntimeError("pipelined() runs inside a transaction")
    raw, prepare = _raw()

    def send(name: str, params: Params) -> psycopg.Cursor:
        cursor = psycopg.Cursor(raw)
        cursor.execute(queries()[name], params, prepare=prepare)
        return cursor

    with connection.wrap_database_errors, raw.pipeline():
        yield send


def array_literal(values: Iterable[str | int]) -> str:
    """``values`` as a PostgreSQL array literal (``{"a","b"}``, ``{1,2}``),
    for a parameter cast to an array (``%(kinds)s::text[]``). A worker's
    claim parameters are the same on every claim: made once as literals,
    psycopg sends each as one string, where a list costs it a Python call
    per element on every statement (~130 us for 19 kinds)."""
    items = []
    for value in values:
        if isinstance(value, str):
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            items.append(f'"{escaped}"')
        else:
            items.append(str(int(value)))
    return "{" + ",".join(items) + "}"


def json_rows(rows: Iterable[tuple[list[object], tuple[str, ...]]]) -> str:
    """A JSON array of one array per row, for a statement that reads its rows
    with ``jsonb_array_elements`` (``create_runs``, the finish fragment):
    each row's plain values encoded, then its JSON texts (a payload, a
    result, already checked and encoded) spliced in after them as they are,
    not parsed and encoded again. One string for psycopg to send, where an
    array per column costs it a Python call per element."""
    encoded = []
    for values, texts in rows:
        head = json.dumps(values)
        encoded.append(",".join((head[:-1], *texts)) + "]" if texts else head)
    return f"[{','.join(encoded)}]"


@contextmanager
def without_jit(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """A transaction whose statements are planned without JIT compilation.

    Over months of partitioned history a read that touches every partition
    (a page deep in the run list, a run's tree, the scrape's bounded reads)
    has an estimated cost past ``jit_above_cost``, and PostgreSQL compiles
    it first: hundreds of milliseconds for a read that runs in a few. The
    console and ``/metrics`` read in one of these; the setting is the
    transaction's (``SET LOCAL``), so it leaves the project's other
    queries, and a pooler's server connection, as they were. ``using``: the
    database the reads go to (a replica's, ``runqueue.reads``).
    """
    with transaction.atomic(using=using):
        set_config(connections[using], "jit", "off")
        yield


def set_config(connection: BaseDatabaseWrapper, name: str, value: str) -> None:
    """Set a server setting on a Django connection for its current
    transaction only (``SET LOCAL``): runqueue sets nothing for a session,
    which a transaction pooler would hand to another client."""
    with connection.cursor() as cursor:
        execute(cursor, "set_config", {"name": name, "value": value})
