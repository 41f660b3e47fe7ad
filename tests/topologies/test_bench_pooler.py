"""The bench's part through PgBouncer (tools/bench/pooler.py, ``python -m tools.bench
--parts pooler``) end to end at its smallest: one round of the three drains
(direct, direct without prepared statements, through a real PgBouncer in
transaction mode) and the pickup direct and pooled, on the test server, in
databases copied from the test database. What must hold is asserted (every
run finished, no more server connections than the pool's size, the figures
there and printed); rates are printed, never asserted."""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

import pytest
from django.db import connection

from tools.bench import common, pooler, report
from tools.topology import pgbouncer

pytestmark = pytest.mark.django_db(transaction=True)


def _url(dbname: str) -> str:
    params = connection.get_connection_params()
    host, port = params.get("host") or "127.0.0.1", params.get("port") or 5432
    user = quote(params.get("user") or "postgres")
    if host.startswith("/"):  # the embedded server's socket folder
        return f"postgres://{user}@/{dbname}?host={quote(host, safe='')}&port={port}"
    return f"postgres://{user}@{host}:{port}/{dbname}"


def test_the_smallest_pooler_part_drains_everything_on_the_pools_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if pgbouncer.binary() is None:
        pytest.skip("pgbouncer is not installed")
    base = _url(connection.get_connection_params()["dbname"])
    monkeypatch.setattr(common, "SERVER_URL", _url("postgres"))
    monkeypatch.setattr(pooler, "PROCESSES", 1)
    monkeypatch.setattr(pooler, "SLOTS", 4)
    monkeypatch.setattr(pooler, "POOL_SIZE", 2)
    profile = dataclasses.replace(common.QUICK, drain_runs=200, pooler_rounds=1, latency_samples=5)
    messages: list[str] = []

    result = pooler.run(profile, base, messages.append, settle=0)

    for variant in pooler.VARIANTS:
        total = result["total"][variant]
        assert total["runs"] == 200 and total["complete"], variant
        assert total["commits_per_run"] > 0 and total["cpu_us_per_run"] > 0
    assert 0 < result["total"]["pooled"]["backends_not_listen_max"] <= 2
    assert result["pooled_to_direct"] > 0
    assert {k: v["n"] for k, v in result["pickup"].items()} == {"direct": 5, "pooled": 5}
    lines = report._pooler(result)
    assert lines[0].startswith("through PgBouncer (issue 20")
    assert any(line.strip().startswith("pooled / direct:") for line in lines)
