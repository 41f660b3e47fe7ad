"""GET a run, page its events, cancel it; tenant isolation and no leaks."""

from __future__ import annotations

import uuid

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.models import EventLog, PriorityClass, Run
from tests.api_helpers import ApiCaller, make_caller, problem, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


@pytest.fixture
def mallory() -> ApiCaller:
    return make_caller("mallory", "globex")


def _run_of(caller: ApiCaller, **kwargs) -> Run:
    return runqueue.submit(
        kind=kwargs.pop("kind", "test.echo"),
        tenant=caller.tenant,
        principal=caller.principal,
        **kwargs,
    ).run


def _without_instance(response) -> dict:
    body = dict(response.json())  # the client caches json(): copy before popping
    body.pop("instance")
    return body


def test_get_run_shows_it(client, alice) -> None:
    run = _run_of(alice, payload={"q": 1}, session_id="s1")
    response = client.get(f"/api/runs/{run.id}/", headers=alice.headers())
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["status"], body["payload"], body["session_id"]) == (
        str(run.id),
        "queued",
        {"q": 1},
        "s1",
    )
    assert body["links"]["self"] == f"/api/runs/{run.id}/"


def test_another_tenants_run_is_byte_identical_to_a_missing_one(client, alice, mallory) -> None:
    run = _run_of(alice, payload={"secret": "acme-only"})
    for path in ("", "events/"):
        theirs = client.get(f"/api/runs/{run.id}/{path}", headers=mallory.headers())
        missing = client.get(f"/api/runs/{uuid.uuid4()}/{path}", headers=mallory.headers())
        malformed = client.get(f"/api/runs/not-a-uuid/{path}", headers=mallory.headers())
        for response in (theirs, missing, malformed):
            problem(response, 404, "not-found")
            assert "acme" not in response.content.decode()
        assert _without_instance(theirs) == _without_instance(missing)
        assert _without_instance(theirs) == _without_instance(malformed)
        assert theirs.headers.items() == missing.headers.items()
    cancel = client.generic("POST", f"/api/runs/{run.id}/cancel/", headers=mallory.headers())
    problem(cancel, 404, "not-found")
    assert Run.objects.get(id=run.id).status == "queued"


def test_session_busy_never_crosses_tenants(client, alice, mallory) -> None:
    """The same session id in two tenants: two runs, no conflict, no leak."""
    _run_of(alice, session_id="shared")
    response = submit(client, mallory, {"kind": "test.echo", "session_id": "shared"})
    assert response.status_code == 201


def test_failed_run_shows_no_traceback(client, alice) -> None:
    run = _run_of(alice, kind="test.fail")
    lease = leases.claim_one("api-test", [PriorityClass.INTERACTIVE])
    assert testing.execute(lease) == "failed"
    assert "Traceback" in Run.objects.get(id=run.id).failure["traceback"]
    response = client.get(f"/api/runs/{run.id}/", headers=alice.headers())
    assert response.json()["failure"] == {
        "classification": "permanent",
        "error_type": "ValueError",
        "message": "unexpected shape",
        "attempt": 1,
    }
    events = client.get(f"/api/runs/{run.id}/events/", headers=alice.headers())
    for answer in (response, events):
        assert "Traceback" not in answer.content.decode()
        assert "traceback" not in answer.content.decode()


def test_events_are_paged_by_cursor(client, alice) -> None:
    run = _run_of(alice, kind="test.ask")
    lease = leases.claim_one("api-test", [PriorityClass.INTERACTIVE])
    assert testing.execute(lease) == "waiting"
    expected = list(
        EventLog.objects.filter(run_id=run.id).order_by("id").values_list("type", flat=True)
    )
    assert expected[:2] == ["run.created", "run.claimed"]
    assert expected[-1] == "run.waiting"
    assert len(expected) == 5  # and two checkpoints: the handler's, and ask_user's
    seen: list[str] = []
    url = f"/api/runs/{run.id}/events/?limit=3"
    pages = 0
    while url:
        response = client.get(url, headers=alice.headers())
        assert response.status_code == 200
        body = response.json()
        seen += [e["type"] for e in body["events"]]
        url = body["next"]
        pages += 1
    assert (seen, pages) == (expected, 2)  # 3 + 2
    first = client.get(f"/api/runs/{run.id}/events/", headers=alice.headers()).json()
    assert first["next"] is None
    claimed = first["events"][1]["data"]
    assert claimed["attempt"] == 1 and "owner" not in claimed  # for operators (issue 47)


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=x", "after=-1", "after=1e3"])
def test_bad_event_page_parameters_answer_400(client, alice, query) -> None:
    run = _run_of(alice)
    response = client.get(f"/api/runs/{run.id}/events/?{query}", headers=alice.headers())
    body = problem(response, 400, "invalid-parameter")
    assert body["parameter"] == query.split("=")[0]


def test_cancel_cancels_once_and_answers_a_retry_the_same(client, alice) -> None:
    run = _run_of(alice)
    response = client.post(
        f"/api/runs/{run.id}/cancel/",
        data='{"reason": "user closed the tab"}',
        content_type="application/json",
        headers=alice.headers(),
    )
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")
    event = EventLog.objects.get(run_id=run.id, type="run.cancelled")
    assert event.data == {"reason": "user closed the tab", "actor": alice.principal}
    again = client.generic("POST", f"/api/runs/{run.id}/cancel/", headers=alice.headers())
    assert (again.status_code, again.json()["status"]) == (200, "cancelled")
    assert EventLog.objects.filter(run_id=run.id, type="run.cancelled").count() == 1


def test_cancel_of_a_finished_run_answers_409(client, alice) -> None:
    run = _run_of(alice)
    lease = leases.claim_one("api-test", [PriorityClass.INTERACTIVE])
    assert testing.execute(lease) == "succeeded"
    response = client.generic("POST", f"/api/runs/{run.id}/cancel/", headers=alice.headers())
    assert problem(response, 409, "run-not-cancellable")["run_status"] == "succeeded"


@pytest.mark.parametrize(
    ("data", "status", "slug"),
    [
        ('{"reason": 5}', 422, "validation-failed"),
        ('{"why": "x"}', 422, "validation-failed"),
        ("{", 400, "malformed-json"),
    ],
)
def test_cancel_body_is_checked(client, alice, data, status, slug) -> None:
    run = _run_of(alice)
    response = client.post(
        f"/api/runs/{run.id}/cancel/",
        data=data,
        content_type="application/json",
        headers=alice.headers(),
    )
    problem(response, status, slug)
    assert Run.objects.get(id=run.id).status == "queued"


def test_a_runs_body_names_the_handler_version_its_first_claim_pinned(client, alice) -> None:
    run = _run_of(alice, priority=PriorityClass.ASYNC)
    url = f"/api/runs/{run.id}/"
    assert client.get(url, headers=alice.headers()).json()["handler_version"] is None
    assert leases.claim_one("w", [PriorityClass.ASYNC]) is not None
    assert client.get(url, headers=alice.headers()).json()["handler_version"] == 1
