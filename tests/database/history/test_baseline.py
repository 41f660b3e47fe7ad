"""The baseline migration (0001_squashed_0034_schedules_api) makes the schema
the chain it replaces (0001_initial to 0034_schedules_api) makes.

Two scratch databases on the test server: one migrated through the chain,
one from the baseline. The chain is forced by a copy of runqueue/migrations
without the baseline, named for runqueue by ``MIGRATION_MODULES``: with the
baseline present, Django gives a database with none of the 34 applied the
baseline. Their catalogs are compared object by object: tables, partitions
and their bounds, columns, indexes, constraints, functions, triggers,
sequences, views, statistics objects, and the rows of runqueue's tables.
What depends on the day of migrating (the day partitions, and the names
PostgreSQL derives from them) is compared as days from the first one, so
two migrations either side of midnight compare alike.

Also: Django's migration state is the chain's and the models'; a database
through the chain gets nothing from ``migrate`` but the baseline's record
(and one short of 0034 goes on through the old files); the baseline reverses.
The migrations after the baseline (``AFTER``) run on both databases.
"""

from __future__ import annotations

import datetime as dt
import importlib
import re
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import psycopg
import pytest
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ModelState
from django.test import override_settings

import runqueue.migrations
from tests.pooling import DIRECT, POOLER

pytestmark = pytest.mark.django_db

BASELINE = "0001_squashed_0034_schedules_api"
MIGRATIONS = Path(runqueue.migrations.__file__).parent
#: The migrations the baseline replaces, in order.
CHAIN = sorted(p.stem for p in MIGRATIONS.glob("0*.py") if p.stem != BASELINE)
#: The migrations the baseline replaces, and those after it (each database
#: applies these through their own files).
REPLACED = [
    name
    for _app, name in importlib.import_module(f"runqueue.migrations.{BASELINE}").Migration.replaces
]
AFTER = [name for name in CHAIN if name not in REPLACED]

# Every object of the schema, as PostgreSQL prints its definition. Not
# compared: OIDs, and the names PostgreSQL 18 gives NOT NULL constraints
# (they follow each table's history: 0009 made the events table beside the
# one it replaced, so the chain's carry a suffix; nullability is compared
# as each column's attnotnull).
CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions::text, c.relispartition,
               pg_get_expr(c.relpartbound, c.oid), pg_get_partkeydef(c.oid), am.amname,
               c.relreplident, c.relrowsecurity,
               (SELECT string_agg(p.relname, ',' ORDER BY p.relname) FROM pg_inherits i
                  JOIN pg_class p ON p.oid = i.inhparent WHERE i.inhrelid = c.oid)
          FROM pg_class c LEFT JOIN pg_am am ON am.oid = c.relam
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind <> 'c'
         ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attname, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, co.collname,
               a.attislocal, a.attinhcount, a.attstorage
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          LEFT JOIN pg_collation co ON co.oid = a.attcollation
         WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0
           AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
         ORDER BY 1, 3""",
    "indexes": """
        SELECT c.relname, i.indrelid::regclass::text, pg_get_indexdef(i.indexrelid),
               i.indisunique, i.indisprimary, i.indisexclusion, i.indimmediate, i.indisvalid,
               i.indisreplident,
               (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
                 WHERE h.inhrelid = i.indexrelid)
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE c.relnamespace = current_schema()::regnamespace
         ORDER BY 1""",
    "constraints": """
        SELECT co.conrelid::regclass::text, co.conname, co.contype,
               pg_get_constraintdef(co.oid), co.condeferrable, co.condeferred, co.convalidated,
               co.conislocal, co.coninhcount, co.connoinherit, co.conindid::regclass::text,
               (SELECT p.conname FROM pg_constraint p WHERE p.oid = co.conparentid)
          FROM pg_constraint co
         WHERE co.connamespace = current_schema()::regnamespace AND co.contype <> 'n'
         ORDER BY 1, 2""",
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
          FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
         ORDER BY 1""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled,
               t.tgparentid <> 0
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
         ORDER BY 1, 2""",
    "sequences": """
        SELECT s.seqrelid::regclass::text, format_type(s.seqtypid, NULL), s.seqstart,
               s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle,
               (SELECT d.refobjid::regclass::text || '.' || a.attname || ' ' || d.deptype::text
                  FROM pg_depend d
                  JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                 WHERE d.classid = 'pg_class'::regclass AND d.objid = s.seqrelid
                   AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')),
               q.last_value
          FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
          JOIN pg_sequences q ON q.schemaname = current_schema() AND q.sequencename = c.relname
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relname LIKE 'runqueue%'
         ORDER BY 1""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid)
          FROM pg_class c
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')
         ORDER BY 1""",
    "statistics": """
        SELECT s.stxname, s.stxrelid::regclass::text, pg_get_statisticsobjdef(s.oid)
          FROM pg_statistic_ext s WHERE s.stxnamespace = current_schema()::regnamespace
         ORDER BY 1""",
}

_TABLES = """
SELECT relname FROM pg_class
 WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
   AND relname LIKE 'runqueue%'
 ORDER BY 1
"""
_FIRST_DAY = """
SELECT min(to_date(substring(relname FROM '[0-9]{8}$'), 'YYYYMMDD')) FROM pg_class
 WHERE relnamespace = current_schema()::regnamespace
   AND relname ~ '^runqueue_run_(finished|event)_p[0-9]{8}$'
"""
_DAY = re.compile(r"_p(\d{8})")
_MONTH = re.compile(r"_p\d{6}_")  # a partition's name cut short in its index's name
_BOUND = re.compile(r"'(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class Databases:
    chain: str
    baseline: str


def _server() -> BaseDatabaseWrapper:
    """The test server, reached directly (not through the pooled mode's pooler)."""
    return connections[DIRECT if POOLER else DEFAULT_DB_ALIAS]


def _connect(name: str) -> psycopg.Connection:
    params = _server().get_connection_params()
    keys = ("host", "port", "user", "password")
    return psycopg.connect(
        dbname=name, autocommit=True, **{k: params[k] for k in keys if params.get(k)}
    )


@contextmanager
def _django(name: str) -> Iterator[BaseDatabaseWrapper]:
    """A Django connection of its own to database ``name`` on the test server,
    under the alias ``name`` while it is open (transactions find theirs by alias)."""
    server = _server()
    wrapper = type(server)({**server.settings_dict, "NAME": name}, alias=name)
    connections[name] = wrapper
    try:
        yield wrapper
    finally:
        wrapper.close()
        del connections[name]


def migrate(
    name: str, package: str | None = None, target: tuple[str, str] | None = None
) -> list[str]:
    """Migrate database ``name`` as ``manage.py migrate`` does (every app to
    its latest, or runqueue to ``target``), runqueue's migrations from
    ``package`` (else runqueue.migrations); the plan it followed."""
    modules = {"runqueue": package} if package else {}
    with override_settings(MIGRATION_MODULES=modules), _django(name) as wrapper:
        executor = MigrationExecutor(wrapper)
        targets = [target] if target else executor.loader.graph.leaf_nodes()
        plan = executor.migration_plan(targets)
        executor.migrate(targets, plan=plan)
    return [f"{m.app_label}.{m.name}{' backwards' if back else ''}" for m, back in plan]


def recorded(name: str) -> list[str]:
    """runqueue's migrations recorded as applied on database ``name``."""
    with _connect(name) as conn:
        rows = conn.execute(
            "SELECT name FROM django_migrations WHERE app = 'runqueue' ORDER BY name"
        ).fetchall()
    return [row[0] for row in rows]


def snapshot(conn: psycopg.Connection) -> dict[str, list[tuple]]:
    """The catalog of the connection's schema, days counted from the first
    day partition; and the rows in each of runqueue's tables."""
    first = conn.execute(_FIRST_DAY).fetchone()[0]

    def day(text: str) -> str:
        offset = (dt.date.fromisoformat(text) - first).days
        return f"+{offset}d"

    def normal(value: object) -> object:
        if not isinstance(value, str) or first is None:
            return value
        value = _DAY.sub(lambda m: f"_p{day(m.group(1))}", value)
        value = _MONTH.sub("_p<month>_", value)
        if value.startswith("FOR VALUES FROM"):
            value = _BOUND.sub(lambda m: f"'{day(m.group(1))}", value)
        return value

    found = {
        part: [tuple(normal(v) for v in row) for row in conn.execute(query).fetchall()]
        for part, query in CATALOG.items()
    }
    tables = [row[0] for row in conn.execute(_TABLES).fetchall()]
    found["rows"] = [
        (normal(table), conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])  # noqa: S608
        for table in tables
    ]
    return found


def differences(chain: dict[str, list[tuple]], baseline: dict[str, list[tuple]]) -> list[str]:
    """What one catalog has and the other has not, part by part."""
    out = []
    for part in chain:
        if chain[part] == baseline[part]:
            continue
        only_chain = [row for row in chain[part] if row not in baseline[part]]
        only_baseline = [row for row in baseline[part] if row not in chain[part]]
        out.append(f"{part}:")
        out += [f"  chain only:    {row}" for row in only_chain[:10]]
        out += [f"  baseline only: {row}" for row in only_baseline[:10]]
        if not only_chain and not only_baseline:
            out.append("  the same rows in another order")
    return out


@pytest.fixture(scope="module")
def chain_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """runqueue's migrations without the baseline, as a package of their own."""
    root = tmp_path_factory.mktemp("chain")
    name = f"runqueue_chain_{uuid.uuid4().hex[:8]}"
    (root / name).mkdir()
    for path in MIGRATIONS.glob("*.py"):
        if path.stem != BASELINE:
            shutil.copy2(path, root / name / path.name)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        yield name
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m.split(".")[0] == name]:
            del sys.modules[module]


@pytest.fixture(scope="module")
def databases(chain_package: str, django_db_setup: None, django_db_blocker) -> Iterator[Databases]:
    """One database migrated through the chain, one from the baseline."""
    with django_db_blocker.unblock():
        prefix = f"{_server().settings_dict['NAME']}_{uuid.uuid4().hex[:6]}"
        made = Databases(chain=f"{prefix}_chain", baseline=f"{prefix}_baseline")
        with _connect("postgres") as conn:
            for name in (made.chain, made.baseline):
                conn.execute(f'CREATE DATABASE "{name}"')
        try:
            chain = [m for m in migrate(made.chain, chain_package) if m.startswith("runqueue.")]
            assert chain == [f"runqueue.{name}" for name in CHAIN]
            baseline = [m for m in migrate(made.baseline) if m.startswith("runqueue.")]
            assert baseline == [f"runqueue.{name}" for name in (BASELINE, *AFTER)]
            yield made
        finally:
            with _connect("postgres") as conn:
                for name in (made.chain, made.baseline):
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def assert_same_schema(databases: Databases) -> None:
    with _connect(databases.chain) as chain, _connect(databases.baseline) as baseline:
        found = differences(snapshot(chain), snapshot(baseline))
    assert not found, "the baseline's schema differs from the chain's:\n" + "\n".join(found)


def test_the_baseline_makes_the_schema_the_chain_makes(databases: Databases) -> None:
    assert_same_schema(databases)


def test_the_comparison_finds_a_missing_index_and_a_changed_function(databases: Databases) -> None:
    """The comparison sees a missing index and a changed function (dropped
    and changed in a transaction rolled back)."""
    with _connect(databases.chain) as conn:
        chain = snapshot(conn)
    with _connect(databases.baseline) as conn, conn.transaction(force_rollback=True):
        conn.execute("DROP INDEX runqueue_run_claim_idx")
        conn.execute("ALTER FUNCTION runqueue_between_turns(uuid) VOLATILE")
        found = "\n".join(differences(chain, snapshot(conn)))
    assert "chain only:    ('runqueue_run_claim_idx'" in found
    assert "chain only:    ('runqueue_between_turns(uuid)'" in found
    assert "baseline only: ('runqueue_between_turns(uuid)'" in found


def test_the_baseline_is_recorded_with_the_migrations_it_replaces(databases: Databases) -> None:
    assert recorded(databases.baseline) == sorted([*CHAIN, BASELINE])
    assert len(REPLACED) == 34 and REPLACED == CHAIN[:34]


def test_a_database_through_the_chain_has_nothing_to_apply(databases: Databases) -> None:
    """A deployment past 0034 gets nothing from the baseline but its record;
    one short of 0034 goes on through the old files."""
    assert recorded(databases.chain) == CHAIN
    assert migrate(databases.chain) == []
    assert recorded(databases.chain) == sorted([*CHAIN, BASELINE])

    undone = ["0034_schedules_api", *AFTER]
    assert migrate(databases.chain, target=("runqueue", "0033_pause_run")) == [
        f"runqueue.{name} backwards" for name in reversed(undone)
    ]
    assert migrate(databases.chain) == [f"runqueue.{name}" for name in undone]
    assert recorded(databases.chain) == sorted([*CHAIN, BASELINE])
    assert_same_schema(databases)


def runqueue_models(modules: dict[str, str]) -> dict[str, ModelState]:
    """runqueue's models as Django's migration state leaves them, with
    runqueue's migrations from ``modules`` (MIGRATION_MODULES)."""
    with override_settings(MIGRATION_MODULES=modules):
        loader = MigrationLoader(None, ignore_no_migrations=True)
        (leaf,) = [node for node in loader.graph.leaf_nodes() if node[0] == "runqueue"]
        state = loader.project_state(leaf)
    return {name: model for (app, name), model in state.models.items() if app == "runqueue"}


def test_the_baseline_leaves_djangos_state_as_the_chain_does(chain_package: str) -> None:
    """Every model's fields (in order), options, bases and managers."""
    chain, baseline = runqueue_models({"runqueue": chain_package}), runqueue_models({})
    assert baseline == chain
    assert {name: list(m.fields) for name, m in baseline.items()} == {
        name: list(m.fields) for name, m in chain.items()
    }


def test_makemigrations_finds_no_changes(chain_package: str) -> None:
    """Neither the baseline's state nor the chain's differs from the models."""
    for modules in ({}, {"runqueue": chain_package}):
        out = StringIO()
        with override_settings(MIGRATION_MODULES=modules):
            call_command("makemigrations", "runqueue", "--check", "--dry-run", stdout=out)
        assert "No changes detected" in out.getvalue(), modules


def test_the_baseline_reverses(databases: Databases) -> None:
    """Unapplied, it leaves nothing of runqueue; applied again, the same schema."""
    assert migrate(databases.baseline, target=("runqueue", None)) == [
        f"runqueue.{name} backwards" for name in (*reversed(AFTER), BASELINE)
    ]
    with _connect(databases.baseline) as conn:
        left = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'runqueue%'"
            " UNION ALL SELECT proname FROM pg_proc WHERE proname LIKE 'runqueue%'"
        ).fetchall()
    assert left == []
    assert recorded(databases.baseline) == []
    assert migrate(databases.baseline) == [f"runqueue.{name}" for name in (BASELINE, *AFTER)]
    assert_same_schema(databases)
