"""Shared fixtures: every test talks to a real PostgreSQL."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from pytest_django.fixtures import Settings

import tests.handlers  # noqa: F401 - registers the kinds the tests submit
from runqueue import db
from tests.pooling import DIRECT, POOL_SIZE, POOLED_RUNQUEUE, POOLER
from tests.worker_processes import start_worker  # noqa: F401 - fixture
from tools.topology import pgbouncer

if POOLER:

    @pytest.fixture(scope="session")
    def django_db_setup(django_db_setup: None) -> Iterator[None]:
        """The pooled mode (tests/pooling.py): once pytest-django has made
        the test database on the server, a PgBouncer in front of it carries
        every connection of "default" (each thread's, raw_connect's, the
        workers'); "direct" reaches the server, for LISTEN. The pooler stops
        before pytest-django drops the database, straight on the server."""
        from django.conf import settings
        from django.db import connections

        from runqueue.conf import get_settings

        default = settings.DATABASES["default"]  # connections["default"]'s own dict
        server = {key: default[key] for key in ("HOST", "PORT")}
        with pgbouncer.start(default, POOLER, pool_size=POOL_SIZE) as bouncer:
            settings.DATABASES[DIRECT] = copy.deepcopy(default)
            connections.close_all()
            default.update(bouncer.through)
            settings.RUNQUEUE = {**getattr(settings, "RUNQUEUE", {}), **POOLED_RUNQUEUE}
            get_settings.cache_clear()
            try:
                yield
            finally:
                connections.close_all()
                default.update(server)
                del settings.DATABASES[DIRECT]

    class _PooledSettings(Settings):
        """pytest-django's ``settings`` whose RUNQUEUE keeps the pooled
        mode's keys when a test sets it anew (the test's own keys win)."""

        def __setattr__(self, attr: str, value: Any) -> None:
            if attr == "RUNQUEUE":
                value = {**POOLED_RUNQUEUE, **value}
            super().__setattr__(attr, value)

    @pytest.fixture
    def settings() -> Iterator[Settings]:
        wrapper = _PooledSettings(_is_pytest_django=True)
        yield wrapper
        wrapper._finalize()


#: The kinds tests/handlers.py registers, which the API tests submit.
TEST_API_KINDS = [
    "test.echo",
    "test.record",
    "test.tools",
    "test.block",
    "test.ask",
    "test.fail",
    "test.pay",
    "k",
]


#: RUNQUEUE keys config/settings.py sets by default that change what a claim does.
PROJECT_DEFAULTS = {"CONCURRENCY"}


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> Iterator[None]:
    """Test users get a cheap password hash (Django's advice for test
    suites): the project's PBKDF2 takes about half a second of CPU per
    ``create_user``, which the suite paid on every user it made. Nothing
    here tests password hashing; a server the tests start in a process of
    its own keeps the project's hashers (none logs in with a password)."""
    from django.test import override_settings

    fast = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])
    fast.enable()
    yield
    fast.disable()


@pytest.fixture(autouse=True)
def _api_kinds(settings) -> None:
    """The API admits the test kinds (a test that sets RUNQUEUE keeps them
    by merging: ``settings.RUNQUEUE = {**settings.RUNQUEUE, ...}``). The
    deployable project's default caps are left out: the library's tests
    start from its own defaults (no caps), test_project tests the project's."""
    configured = {
        k: v for k, v in getattr(settings, "RUNQUEUE", {}).items() if k not in PROJECT_DEFAULTS
    }
    kinds = list(dict.fromkeys([*configured.get("API_KINDS", []), *TEST_API_KINDS]))
    settings.RUNQUEUE = {**configured, "API_KINDS": kinds}


@pytest.fixture(autouse=True)
def _async_connections_closed() -> Iterator[None]:
    """A test that ran async handlers in this process leaves no database
    connection behind on runqueue.runtime.aio's threads: a later test that counts
    the test database's backends (the bench's) must find only its own."""
    from runqueue.runtime import aio

    yield
    aio.close_connections()


@pytest.fixture(autouse=True)
def _fresh_limits_cache() -> Iterator[None]:
    """Each test reads whether concurrency limits exist afresh: flushing the
    database between tests deletes them without a signal."""
    from runqueue.capacity import budgets, concurrency

    concurrency.invalidate()
    budgets.invalidate()
    yield
    concurrency.invalidate()
    budgets.invalidate()


@pytest.fixture(autouse=True)
def _fresh_django_cache() -> Iterator[None]:
    """Django's cache (the admin's tenant choices are kept a minute in it)
    starts empty: the database is flushed between tests, the cache is not."""
    from django.core.cache import cache

    cache.clear()
    yield


@pytest.fixture
def raw_connect(transactional_db: None) -> Iterator[Callable[..., psycopg.Connection]]:
    """Open extra real connections to the test database (closed afterwards)."""
    opened: list[psycopg.Connection] = []

    def connect(*, autocommit: bool = True) -> psycopg.Connection:
        conn = db.connect(autocommit=autocommit)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


@pytest.fixture
def empty_ledger() -> None:
    """The handlers' ledger (tests/handlers.py), there and empty. Made on a
    connection of its own, so it is committed whatever the test's own
    transaction: the handlers write to it through connections of theirs."""
    from tests.handlers import LEDGER_DDL

    with db.connect() as conn:
        conn.execute(LEDGER_DDL)
        conn.execute("TRUNCATE runqueue_test_ledger")


@pytest.fixture
def fast_retry(settings) -> None:
    """No backoff delay, so a requeued run is due at once."""
    settings.RUNQUEUE = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}


@pytest.fixture
def hooks() -> Iterator[object]:
    """The leases test hooks, reset after the test."""
    from runqueue.leases import hooks as leases_hooks

    yield leases_hooks
    leases_hooks.inside_fence = None
    leases_hooks.inside_sweep = None
