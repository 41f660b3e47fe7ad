"""The budget soak (tools/bench/budget_soak.py, ``python -m tools.bench --parts budgets``)
end to end on its smallest profile: two real ``runworker`` processes drain
three saturated tenants' budgeted runs against the fake provider in the test
database; the figures the soak must hold (issue 23) are asserted, and the
report prints them. Rates and shares are printed, never asserted."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pytest
from django.db import connection
from psycopg.conninfo import make_conninfo

from runqueue import registry
from tools.bench import budget_soak, common, report

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def soak_kind() -> Iterator[None]:
    """``bench.budget_call`` registered in this process (submit checks the
    kind), and the registry as it was afterwards."""
    from tools.bench import handlers

    registered = registry.is_registered(budget_soak.KIND)
    registry.handler(budget_soak.KIND)(handlers.budget_call)
    try:
        yield
    finally:
        if not registered:
            registry.unregister(budget_soak.KIND)


def _database_url() -> str:
    """The test database as a DATABASE_URL for the soak's runworker processes."""
    params = connection.get_connection_params()
    host, port = params.get("host") or "127.0.0.1", params.get("port") or 5432
    user, name = quote(params.get("user") or "postgres"), params["dbname"]
    if host.startswith("/"):  # the embedded server's socket folder
        return f"postgres://{user}@/{name}?host={quote(host, safe='')}&port={port}"
    return f"postgres://{user}@{host}:{port}/{name}"


def test_the_smallest_budget_soak_keeps_the_budget_the_pauses_and_every_claim(
    monkeypatch: pytest.MonkeyPatch, soak_kind: None
) -> None:
    params = connection.get_connection_params()
    server = make_conninfo(
        dbname="postgres",
        **{k: params[k] for k in ("host", "port", "user", "password") if params.get(k)},
    )
    monkeypatch.setattr(common, "SERVER_URL", server)  # counts commits from there
    messages: list[str] = []

    result = budget_soak.soak(common.QUICK, _database_url(), messages.append)

    assert result["runs"] > 0
    assert result["calls"] >= result["runs"]
    assert result["claims"] > 0
    window = result["worst_window"]
    assert 0 < window["tokens"] <= window["budget_plus_one_reservation"]
    assert window["calls"] <= window["budget_requests"]
    assert result["budget_overruns"] == 0
    assert result["calls_reserved_while_paused"] == 0
    assert result["claim_then_reject_cycles"] == 0
    assert sum(s["tokens"] for s in result["shares"].values()) == result["tokens_used"]
    assert result["commits_per_run"] > 0 and result["cpu_us_per_run"] > 0
    lines = report._budget_soak(result)
    assert lines[0].startswith("budget soak (issue 23)")
    assert any("overruns" in line for line in lines)
