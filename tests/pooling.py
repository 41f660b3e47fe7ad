"""The pooled test mode: ``RUNQUEUE_TEST_POOLER=transaction`` sends the test
process's default database, and the workers' it starts, through a real
PgBouncer in that mode (tests/conftest.py starts it once the test database
exists). The fencing, lease, race and worker tests then race real
connections that share a few server connections, as behind a pooler in
production; ``.ci/run`` runs that selection (docs/reliability.md).
"""

from __future__ import annotations

import os

import pytest

#: The pool mode the tests go through ("" : straight to the server).
POOLER = os.environ.get("RUNQUEUE_TEST_POOLER", "")
if POOLER not in ("", "transaction"):
    raise RuntimeError(f"RUNQUEUE_TEST_POOLER must be empty or 'transaction', got {POOLER!r}")

#: Server connections the pooler keeps per database: fewer than one
#: runworker's default slots (5), and than the racing tests' threads.
POOL_SIZE = int(os.environ.get("RUNQUEUE_TEST_POOL_SIZE", "3"))

#: The DATABASES alias that reaches the server straight (LISTEN, and what
#: a session of its own needs): the workers' name for it, and the tests'.
DIRECT = "direct"

#: RUNQUEUE keys every test runs with in this mode, as docs/operations.md says to
#: run behind a transaction pooler (a test's own keys win).
POOLED_RUNQUEUE = {"POOLER": "transaction", "LISTEN_DATABASE": DIRECT} if POOLER else {}


def not_through_a_pooler(reason: str) -> pytest.MarkDecorator:
    """Skip in the pooled mode: the test needs what a transaction pooler
    cannot give a client (``reason`` says what)."""
    return pytest.mark.skipif(bool(POOLER), reason=f"through a transaction pooler: {reason}")
