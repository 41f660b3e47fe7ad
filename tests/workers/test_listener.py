"""The worker's LISTEN thread: on its own connection (runqueue.db.connect),
it says when LISTEN is in place, and wakes with what each NOTIFY names."""

from __future__ import annotations

import queue
import threading

import pytest
from django.db import connection

from runqueue import db
from runqueue.worker.listener import Listener

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_notify_after_listen_wakes_with_its_payload() -> None:
    woken: queue.Queue[str] = queue.Queue()
    stopping = threading.Event()
    listener = Listener("runqueue_test_listener", woken.put, stopping)
    listener.start()
    try:
        assert listener.wait_listening(10)
        assert woken.get(timeout=10) == ""  # on (re)connect: any class may have work
        with db.connect() as conn:
            conn.execute("SELECT pg_notify('runqueue_test_listener', 'async')")
        assert woken.get(timeout=10) == "async"
    finally:
        stopping.set()
        listener.join(10)
    assert not listener.is_alive()


def test_connect_opens_a_session_on_djangos_database_autocommit_unless_told() -> None:
    with db.connect() as conn:
        assert conn.autocommit
        assert (
            conn.execute("SELECT current_database()").fetchone()[0]
            == (connection.settings_dict["NAME"])
        )
    with db.connect(autocommit=False) as conn:
        assert not conn.autocommit
