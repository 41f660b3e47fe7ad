"""POST /api/runs/<id>/signals/<name>/: tenant-scoped like the rest of the
API, described in its OpenAPI document; and the run's parent and wait in
its representation, and a cancel that cascades unless told not to."""

from __future__ import annotations

import uuid

import pytest

import runqueue
from runqueue import leases, runtime
from runqueue.leases.outcomes import Suspended
from runqueue.models import PriorityClass, Run, Signal
from tests.api_helpers import ApiCaller, make_caller, problem

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _writable_kinds(settings) -> None:
    """The API writes to runs of the kinds it may submit (test_api_writes.py)."""
    kinds = [*settings.RUNQUEUE["API_KINDS"], "test.wait_signal", "test.fanout"]
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_KINDS": kinds}


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


@pytest.fixture
def mallory() -> ApiCaller:
    return make_caller("mallory", "globex")


def _waiting_run(caller: ApiCaller) -> Run:
    runqueue.submit(kind="test.wait_signal", tenant=caller.tenant, principal=caller.principal)
    lease = leases.claim_one("api", [PriorityClass.INTERACTIVE])
    assert leases.write(lease, Suspended(reason="signal", wait_name="go", timeout=60))
    return Run.objects.get(id=lease.run_id)


def _post(client, caller: ApiCaller, run_id, name: str, body: str | None = None):
    return client.generic(
        "POST",
        f"/api/runs/{run_id}/signals/{name}/",
        body or "",
        content_type="application/json",
        headers=caller.headers(),
    )


def test_a_signal_resumes_a_waiting_run_or_waits_in_its_mailbox(client, alice) -> None:
    run = _waiting_run(alice)
    body = _post(client, alice, run.id, "other", '{"n": 1}')
    assert (body.status_code, body.json()["delivery"]) == (202, "kept")
    shown = body.json()["run"]
    assert shown["wait"]["reason"] == "signal" and shown["wait"]["name"] == "go"
    assert shown["wait"]["until"] is not None and shown["status"] == "waiting"
    answer = _post(client, alice, run.id, "go", '{"approved": true}')
    assert (answer.status_code, answer.json()["delivery"]) == (202, "delivered")
    assert answer.json()["run"]["status"] == "queued"
    assert answer.json()["run"]["input"] == {"approved": True}
    assert answer.json()["run"]["wait"] is None
    assert list(Signal.objects.values_list("name", flat=True)) == ["other"]


def test_another_tenants_run_takes_no_signal(client, alice, mallory) -> None:
    run = _waiting_run(alice)
    theirs = _post(client, mallory, run.id, "go")
    missing = _post(client, mallory, uuid.uuid4(), "go")
    assert theirs.status_code == missing.status_code == 404
    assert Run.objects.get(id=run.id).status == "waiting"
    assert not Signal.objects.exists()


def test_a_finished_run_answers_409(client, alice) -> None:
    run = _waiting_run(alice)
    runqueue.cancel(run.id, reason="x", actor="t")
    assert problem(_post(client, alice, run.id, "go"), 409, "run-not-signallable")


def test_the_openapi_document_describes_signals(client) -> None:
    paths = client.get("/api/openapi.json").json()["paths"]
    assert "post" in paths["/api/runs/{run_id}/signals/{name}/"]


def test_a_child_shows_its_parent_and_a_cancel_may_spare_the_children(client, alice) -> None:
    runqueue.submit(kind="test.fanout", tenant=alice.tenant, principal=alice.principal)
    lease = leases.claim_one("api", [PriorityClass.INTERACTIVE])
    child = runtime.build_context(lease).spawn("test.echo", priority=PriorityClass.ASYNC)
    shown = client.get(f"/api/runs/{child}/", headers=alice.headers()).json()
    assert shown["parent_id"] == str(lease.run_id)
    response = client.generic(
        "POST",
        f"/api/runs/{lease.run_id}/cancel/",
        '{"cascade": false}',
        content_type="application/json",
        headers=alice.headers(),
    )
    assert response.status_code == 200
    assert Run.objects.get(id=child).status == "queued"
    runqueue.cancel(child, reason="x", actor="t")
