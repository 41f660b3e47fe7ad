"""The HTTP API's side of forks and costs: a run's JSON shows its lineage
both ways and what it and its tree recorded; submit takes ``spend_cap``."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

import runqueue
from runqueue import leases, testing
from runqueue.models import Run, TreeSpend
from tests.api_helpers import RUNS, make_caller, submit

pytestmark = pytest.mark.django_db


def test_submit_takes_a_spend_cap_and_the_run_shows_it() -> None:
    caller = make_caller("ann", "acme")
    client = Client()
    response = submit(client, caller, {"kind": "test.echo", "spend_cap": 2.5})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["spend_cap"] == "2.5"
    assert (
        body["usage"]
        == body["tree_usage"]
        == {
            "input_tokens": 0,
            "output_tokens": 0,
            "cost": "0",
            "calls": 0,
            "unpriced_calls": 0,
        }
    )
    assert (body["forked_from"], body["forks"]) == (None, [])
    assert TreeSpend.objects.get(run_id=body["id"]).spend_cap == Decimal("2.5")
    # The same key with another cap is another request.
    again = submit(client, caller, {"kind": "test.echo", "spend_cap": 3})
    assert again.status_code == 422, again.content
    assert again.json()["type"].endswith("idempotency-key-reused")


@pytest.mark.parametrize("cap", [0, -1, "1", True, 1e400])
def test_a_bad_spend_cap_is_a_422_and_writes_nothing(cap: object) -> None:
    caller = make_caller("bea", "acme")
    response = submit(Client(), caller, {"kind": "test.echo", "spend_cap": cap})
    assert response.status_code == 422 if cap != 1e400 else response.status_code in (400, 422)
    assert not Run.objects.exists()


def test_a_runs_json_shows_its_forks_and_its_usage(settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "PRICES": {"m": {"input": 1, "output": 1}}}
    caller = make_caller("cid", "acme")
    run = runqueue.submit(
        kind="test.usage",
        tenant="acme",
        payload={"calls": [{"model": "m", "in": 2_000_000, "out": 1_000_000}]},
    ).run
    lease = leases.claim_one("w-test")
    assert lease is not None and testing.execute(lease) == "succeeded"
    fork = runqueue.fork(run.id, from_step=0, actor="a", reason="r")
    client = Client()
    body = client.get(f"{RUNS}{run.id}/", headers=caller.headers()).json()
    assert body["forks"] == [str(fork.id)]
    assert body["usage"] == {
        "input_tokens": 2_000_000,
        "output_tokens": 1_000_000,
        "cost": "3",
        "calls": 1,
        "unpriced_calls": 0,
    }
    assert body["tree_usage"] == body["usage"]
    forked = client.get(f"{RUNS}{fork.id}/", headers=caller.headers()).json()
    assert forked["forked_from"] == str(run.id)
    assert forked["usage"]["calls"] == 0
