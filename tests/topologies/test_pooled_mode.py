"""The pooled test mode (tests/pooling.py) is what it says: with
RUNQUEUE_TEST_POOLER set, the test process's connections share the pool's
few server connections and RUNQUEUE says so; without it, nothing changes."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from runqueue import db
from runqueue.conf import get_settings
from tests.helpers import Worker
from tests.pooling import DIRECT, POOL_SIZE, POOLER

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not POOLER, reason="RUNQUEUE_TEST_POOLER is not set"),
]


def test_the_tests_connections_share_the_pools_server_connections(settings) -> None:
    """More clients than the pool has server connections, each holding a
    transaction open in turn: their backends are among POOL_SIZE; the
    settings a test sets keep the pooled keys; "direct" is the server."""
    clients = POOL_SIZE * 3
    backends: set[int] = set()
    lock = threading.Lock()

    def one_transaction() -> None:
        with db.connect(autocommit=False) as conn:
            (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
            conn.rollback()
        with lock:
            backends.add(pid)

    threads = [Worker(one_transaction, name=f"client-{i}") for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.outcome()
    assert 1 <= len(backends) <= POOL_SIZE
    settings.RUNQUEUE = {"BACKOFF_JITTER": 0}
    conf = get_settings()
    assert (conf.POOLER, conf.LISTEN_DATABASE, conf.prepares) == ("transaction", DIRECT, False)
    # psycopg's backend pid is PgBouncer's own, not a server backend's;
    # "direct"'s is the server's.
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
            [connection.connection.info.backend_pid],
        )
        assert cursor.fetchone()[0] == 0
    assert connections[DIRECT].settings_dict["PORT"] != connection.settings_dict["PORT"]
