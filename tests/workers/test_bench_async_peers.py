"""The peers' part of ``tools.bench.async_turns`` in its smallest form: each peer's
async worker, in a process of its own, drains a few turns queued into it
while idle, and the bench reads the drain from the peer's own tables, counts
its commits and stops it. Real PostgreSQL (a scratch database on the test
server); skipped where the bench extra (the peers) is not installed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from urllib.parse import urlencode

import psycopg
import pytest
from django.db import connection

from tools.bench import async_turns, common, measure

pytest.importorskip("procrastinate")
pytest.importorskip("pgqueuer")
pytest.importorskip("asyncpg")

TURNS = 4
MODEL_CALL_S = 0.3


def _url(dbname: str) -> str:
    """A URL both psycopg and asyncpg take (asyncpg reads no keyword conninfo)."""
    params = connection.get_connection_params()
    query = {k: params[k] for k in ("host", "port", "password") if params.get(k)}
    return f"postgresql://{params.get('user') or 'postgres'}@/{dbname}?{urlencode(query)}"


@pytest.fixture
def scratch(db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = _url("postgres")
    monkeypatch.setattr(common, "SERVER_URL", server)
    # The count's settle wait is for figures; the test needs the run only.
    monkeypatch.setattr(async_turns, "SETTLE_SECONDS", 0.0)
    name = f"bench_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _url(name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("system", ["procrastinate", "pgqueuer"])
def test_a_peers_async_worker_drains_the_turns_and_is_measured_and_stopped(
    scratch: str, system: str
) -> None:
    if system == "procrastinate":
        from tools.bench.peers.procrastinate_peer import _install
    else:
        from tools.bench.peers.pgqueuer_peer import _install
    asyncio.run(_install(scratch))

    result = async_turns.turns(
        scratch, async_turns._peer_spec(system, scratch, TURNS, MODEL_CALL_S), TURNS
    )

    assert result["runs"] == TURNS
    # Read from the peer's tables: every turn awaited its model call after its start.
    assert result["last_claim_to_last_finish_s"] >= MODEL_CALL_S
    assert result["first_claim_to_last_finish_s"] >= result["last_claim_to_last_finish_s"]
    assert result["commits"] >= TURNS  # at least a finish per job
    assert result["server_connections_peak"] >= 1
    assert result["threads_peak"] >= 1
    assert str(TURNS) in result["shape"]  # concurrency as asked
    # The worker is gone: nothing of it is left connected.
    stats = measure.Stats(scratch.split("/")[-1].split("?")[0])
    try:
        assert stats.backends() == set()
    finally:
        stats.close()
    rendered = async_turns.table({f"turns_{system}": result})
    assert ("Procrastinate" if system == "procrastinate" else "PgQueuer") in rendered
