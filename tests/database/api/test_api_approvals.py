"""POST /api/runs/<id>/tools/<seq>/decision/ and GET /api/runs/<id>/steps/:
a tool call awaiting approval decided over the API, scoped to the caller's
tenant, retried safely; the run's steps as support reads them."""

from __future__ import annotations

import json

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.models import Run, ToolInvocation
from tests.api_helpers import ApiCaller, make_caller, problem
from tests.database.runtime.test_approvals import CALLS

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _writable_kinds(settings) -> None:
    kinds = [*settings.RUNQUEUE["API_KINDS"], "approvals.refund"]
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_KINDS": kinds}
    CALLS.clear()


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


@pytest.fixture
def mallory() -> ApiCaller:
    return make_caller("mallory", "globex")


def _asked(caller: ApiCaller) -> Run:
    run = runqueue.submit(
        kind="approvals.refund",
        payload={"amount": 40},
        tenant=caller.tenant,
        principal=caller.principal,
    ).run
    assert testing.execute(leases.claim_one("w")) == "waiting"
    return run


def _decide(client, caller: ApiCaller, run_id, seq, body, key: str | None = None):
    return client.post(
        f"/api/runs/{run_id}/tools/{seq}/decision/",
        data=json.dumps(body),
        content_type="application/json",
        headers=caller.headers(key),
    )


def test_a_decision_over_the_api_resumes_the_run(client, alice) -> None:
    run = _asked(alice)
    shown = client.get(f"/api/runs/{run.id}/", headers=alice.headers()).json()
    steps = client.get(shown["links"]["steps"], headers=alice.headers()).json()["steps"]
    assert [(s["seq"], s["tool"], s["status"]) for s in steps] == [
        (0, "lookup", "completed"),
        (1, "refund", "awaiting_approval"),
    ]
    asked = steps[1]
    assert asked["arguments"] == {"order": 7, "amount": 40}
    assert "decision" not in steps[0]

    answer = _decide(client, alice, run.id, 1, {"decision": "reject", "reason": "shipped"}, "k1")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["step"]["status"] == "rejected"
    assert body["step"]["approval"]["decided"]["actor"] == alice.principal
    assert body["run"]["status"] == "queued"
    assert "Idempotent-Replayed" not in answer.headers

    again = _decide(client, alice, run.id, 1, {"decision": "reject", "reason": "shipped"}, "k1")
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["step"]["approval"] == body["step"]["approval"]

    other = _decide(client, alice, run.id, 1, {"decision": "approve"}, "k2")
    problem(other, 409, "tool-not-awaiting-approval")
    assert ToolInvocation.objects.get(run_id=run.id, seq=1).status == "rejected"

    assert testing.execute(leases.claim_one("w")) == "succeeded"
    assert Run.objects.get(id=run.id).result["status"] == "rejected"


def test_another_tenants_run_is_not_found(client, alice, mallory) -> None:
    run = _asked(alice)
    problem(_decide(client, mallory, run.id, 1, {"decision": "approve"}), 404, "not-found")
    problem(client.get(f"/api/runs/{run.id}/steps/", headers=mallory.headers()), 404, "not-found")
    assert ToolInvocation.objects.get(run_id=run.id, seq=1).status == "awaiting_approval"


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({}, "/decision"),
        ({"decision": "maybe"}, "/decision"),
        ({"decision": "edit"}, "/arguments"),
        ({"decision": "approve", "extra": 1}, "/extra"),
        ({"decision": "reject", "reason": 5}, "/reason"),
        ({"decision": "respond", "result": 1, "arguments": {}}, "/arguments"),
    ],
)
def test_bad_decisions_are_422_and_write_nothing(client, alice, body, pointer) -> None:
    run = _asked(alice)
    answer = problem(_decide(client, alice, run.id, 1, body), 422, "validation-failed")
    assert pointer in [e["pointer"] for e in answer["errors"]]
    assert ToolInvocation.objects.get(run_id=run.id, seq=1).status == "awaiting_approval"


def test_a_call_that_needs_no_approval_or_does_not_exist(client, alice) -> None:
    run = _asked(alice)
    problem(
        _decide(client, alice, run.id, 0, {"decision": "approve"}),
        409,
        "tool-not-awaiting-approval",
    )
    problem(_decide(client, alice, run.id, 5, {"decision": "approve"}), 404, "not-found")


def test_a_finished_run_takes_no_decision(client, alice) -> None:
    run = _asked(alice)
    runqueue.cancel(run.id, reason="closed", actor="t")
    problem(_decide(client, alice, run.id, 1, {"decision": "approve"}), 409, "run-finished")
