"""POST /api/runs/ with ``on_busy`` and a run's session line in its body
(docs/decisions.md, "Busy sessions: on_busy")."""

from __future__ import annotations

import pytest

from runqueue import leases, testing
from runqueue.api.openapi import document
from runqueue.models import IdempotencyKey, Run, RunStatus
from tests.api_helpers import ApiCaller, make_caller, new_key, problem, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


def _turn(client, alice, text: str, on_busy: str | None = None, key: str | None = None):
    body = {"kind": "test.echo", "payload": {"text": text}, "session_id": "s1"}
    if on_busy is not None:
        body["on_busy"] = on_busy
    return submit(client, alice, body, key=key or new_key())


def test_enqueue_answers_201_with_a_pending_run_and_the_session_line(client, alice) -> None:
    first = _turn(client, alice, "one").json()
    response = _turn(client, alice, "two", "enqueue")
    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["place"]) == (RunStatus.PENDING, 1)
    assert body["session"] == {
        "active": {"id": first["id"], "status": "queued", "place": None},
        "pending": [{"id": body["id"], "status": "pending", "place": 1}],
    }
    # The active run's body shows the same line.
    seen = client.get(f"/api/runs/{first['id']}/", headers=alice.headers()).json()
    assert [t["id"] for t in seen["session"]["pending"]] == [body["id"]]
    assert seen["session"]["active"]["id"] == first["id"]
    # Once the active run ends, the pending run is queued.
    testing.succeed(leases.claim_one("w1"))
    now = client.get(f"/api/runs/{body['id']}/", headers=alice.headers()).json()
    assert now["status"] == "queued"
    assert now["session"] == {
        "active": {"id": body["id"], "status": "queued", "place": 1},
        "pending": [],
    }


def test_a_run_in_no_session_has_no_session_line(client, alice) -> None:
    body = submit(client, alice, {"kind": "test.echo"}).json()
    assert (body["session"], body["place"], body["interrupted_id"]) == (None, None, None)


def test_reject_is_the_default_409_session_busy(client, alice) -> None:
    _turn(client, alice, "one")
    body = problem(_turn(client, alice, "two"), 409, "session-busy")
    assert "on_busy" in body["detail"]


def test_a_full_line_is_409_session_queue_full_and_stores_no_key(client, alice, settings) -> None:
    settings.RUNQUEUE = {"API_KINDS": ["test.echo"], "SESSION_MAX_PENDING": 1}
    first = _turn(client, alice, "one").json()
    _turn(client, alice, "two", "enqueue")
    response = _turn(client, alice, "three", "enqueue", key="k-full")
    body = problem(response, 409, "session-queue-full")
    assert response["Retry-After"] == "1"
    assert (body["max_pending"], body["active_run"]) == (1, f"/api/runs/{first['id']}/")
    assert not IdempotencyKey.objects.filter(key="k-full").exists()


def test_merge_answers_202_with_the_run_it_joined(client, alice) -> None:
    first = _turn(client, alice, "hi").json()
    response = _turn(client, alice, "there?", "merge", key="k-merge")
    assert response.status_code == 202
    assert response.json()["id"] == first["id"]
    assert response.json()["payload"] == {"text": "hi"}
    assert response.json()["payloads"] == [{"text": "hi"}, {"text": "there?"}]
    again = _turn(client, alice, "there?", "merge", key="k-merge")
    assert (again.status_code, again["Idempotent-Replayed"]) == (202, "true")
    assert Run.objects.count() == 1


def test_interrupt_answers_201_with_the_new_run_naming_the_old(client, alice) -> None:
    first = _turn(client, alice, "one").json()
    response = _turn(client, alice, "stop", "interrupt")
    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["interrupted_id"]) == ("queued", first["id"])
    assert Run.objects.get(id=first["id"]).status == RunStatus.CANCELLED


@pytest.mark.django_db(transaction=True)  # the answer's own snapshot, as in production
def test_an_interrupts_201_shows_the_run_and_its_session_at_one_moment(
    client, alice, monkeypatch
) -> None:
    """Issue 47 item 8: the body showed the new run ``queued`` and, in the
    same body, the session's active run (the same run) ``running``: the run
    was read in the submit's transaction, its session later, after a worker
    claimed it. Both are read in one snapshot now."""
    import runqueue
    from runqueue.api import runs

    first = _turn(client, alice, "one").json()
    real_submit = runqueue.submit

    def submit_then_a_worker_claims(**kwargs):
        done = real_submit(**kwargs)
        lease = leases.claim_one("w-fast")  # between the submit's commit and the answer
        assert lease is not None and lease.run_id == done.run.id
        return done

    monkeypatch.setattr(runs.runqueue, "submit", submit_then_a_worker_claims)
    response = _turn(client, alice, "stop", "interrupt")
    assert response.status_code == 201
    body = response.json()
    assert body["interrupted_id"] == first["id"]
    assert body["session"]["active"]["id"] == body["id"]
    assert body["session"]["active"]["status"] == body["status"]


@pytest.mark.parametrize("value", ["later", 3, ["enqueue"]])
def test_an_unknown_on_busy_is_422_at_its_pointer_and_writes_nothing(client, alice, value) -> None:
    _turn(client, alice, "one")
    response = submit(
        client,
        alice,
        {"kind": "test.echo", "session_id": "s1", "on_busy": value},
        key=new_key(),
    )
    body = problem(response, 422, "validation-failed")
    (error,) = body["errors"]
    assert error["pointer"] == "/on_busy"
    assert "must be one of reject, enqueue, interrupt, rollback, merge" in error["detail"]
    assert Run.objects.count() == 1


def test_the_schema_describes_on_busy_and_the_session_line() -> None:
    schemas = document()["components"]["schemas"]
    assert schemas["SubmitRun"]["properties"]["on_busy"]["enum"] == [
        "reject",
        "enqueue",
        "interrupt",
        "rollback",
        "merge",
        "steer",
        "answer",
        "debounce",
        "latest",
        None,
    ]
    run = schemas["Run"]["properties"]
    assert {"place", "interrupted_id", "session"} <= set(run)
    assert "pending" in run["status"]["enum"]
    assert schemas["SessionLine"]["required"] == ["active", "pending"]
