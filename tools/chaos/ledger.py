"""The side-effect ledger: what the chaos handlers' tools did.

Written through a connection of its own in autocommit, outside every worker
transaction, so an effect stays recorded even when its worker is fenced or
killed a moment later — like a charge at a payment provider.
"""

from __future__ import annotations

import threading

import psycopg

from runqueue import db

DDL = """
CREATE TABLE IF NOT EXISTS chaos_ledger (
    id bigserial PRIMARY KEY,
    run_id uuid NOT NULL,
    tool text NOT NULL,
    idempotency text NOT NULL,
    key text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_local = threading.local()


def _connection() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = db.connect(connect_timeout=5)
        _local.conn = conn
    return conn


def record(run_id: str, tool: str, idempotency: str, key: str) -> None:
    """Record one effect; raise if it could not be recorded (it did not happen)."""
    try:
        _connection().execute(
            "INSERT INTO chaos_ledger (run_id, tool, idempotency, key) VALUES (%s, %s, %s, %s)",
            (run_id, tool, idempotency, key),
        )
    except psycopg.Error:
        _local.conn = None
        raise
