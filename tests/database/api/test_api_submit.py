"""POST /api/runs/: every row of the status table (RELIABILITY §2.4)."""

from __future__ import annotations

import json

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.models import IdempotencyKey, PriorityClass, Run, RunStatus
from tests.api_helpers import RUNS, ApiCaller, make_caller, problem, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


def test_created_answers_201_with_location_and_the_run(client, alice) -> None:
    response = submit(
        client,
        alice,
        {"kind": "test.echo", "payload": {"text": "hi"}, "session_id": "s1", "priority": "async"},
    )
    assert response.status_code == 201
    body = response.json()
    run = Run.objects.get(id=body["id"])
    assert response["Location"] == f"/api/runs/{run.id}/"
    assert "Idempotent-Replayed" not in response
    assert (run.tenant, run.principal, run.kind, run.payload, run.priority) == (
        "acme",
        alice.principal,
        "test.echo",
        {"text": "hi"},
        PriorityClass.ASYNC,
    )
    assert body["status"] == "queued"
    assert body["priority_class"] == "async"
    assert body["links"]["events"] == f"/api/runs/{run.id}/events/"
    assert body["links"]["stream"] == f"/api/runs/{run.id}/stream/"  # issue 26
    assert IdempotencyKey.objects.get().key == "key-1"


def test_replay_answers_as_the_original_did_with_the_same_run(client, alice) -> None:
    first = submit(client, alice, {"kind": "test.echo", "payload": {"a": 1, "b": 2}})
    # Same body with its keys reordered: the same request.
    again = submit(
        client, alice, None, raw_body='{"payload": {"b": 2, "a": 1}, "kind": "test.echo"}'
    )
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"]
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.count() == 1


def test_replay_shows_the_run_as_it_is_now(client, alice) -> None:
    first = submit(client, alice, {"kind": "test.echo"}).json()
    runqueue.cancel(first["id"], reason="test", actor="tester")
    again = submit(client, alice, {"kind": "test.echo"})
    assert (again.status_code, again.json()["status"]) == (201, "cancelled")


def _waiting_run(caller: ApiCaller, session_id: str) -> Run:
    sub = runqueue.submit(
        kind="test.ask", session_id=session_id, tenant=caller.tenant, principal=caller.principal
    )
    lease = leases.claim_one("api-test", [PriorityClass.INTERACTIVE])
    assert lease is not None and lease.run_id == sub.run.id
    assert testing.execute(lease) == "waiting"
    return sub.run


def test_input_delivery_answers_202_and_its_replay_202(client, alice) -> None:
    waiting = _waiting_run(alice, "s1")
    body = {"kind": "test.ask", "session_id": "s1", "payload": {"day": "Monday"}}
    response = submit(client, alice, body, key="answer-1")
    assert response.status_code == 202
    assert response.json()["id"] == str(waiting.id)
    assert response.json()["status"] == "queued"
    assert response.json()["input"] == {"day": "Monday"}
    assert response["Location"] == f"/api/runs/{waiting.id}/"
    again = submit(client, alice, body, key="answer-1")
    assert (again.status_code, again["Idempotent-Replayed"]) == (202, "true")
    assert again.json()["id"] == str(waiting.id)
    assert Run.objects.count() == 1


def test_busy_session_answers_409_naming_the_active_run(client, alice) -> None:
    active = submit(client, alice, {"kind": "test.echo", "session_id": "s1"}).json()
    response = submit(client, alice, {"kind": "test.echo", "session_id": "s1"}, key="key-2")
    body = problem(response, 409, "session-busy")
    assert body["active_run"] == f"/api/runs/{active['id']}/"
    assert (body["session_id"], body["active_run_status"]) == ("s1", "queued")
    assert "Retry-After" not in response
    # The key was not stored: the same key works once the session is free.
    runqueue.cancel(active["id"], reason="done", actor="tester")
    retry = submit(client, alice, {"kind": "test.echo", "session_id": "s1"}, key="key-2")
    assert retry.status_code == 201


def test_key_reused_with_another_body_answers_422_without_the_run(client, alice) -> None:
    first = submit(client, alice, {"kind": "test.echo", "payload": {"n": 1}}).json()
    response = submit(client, alice, {"kind": "test.echo", "payload": {"n": 2}})
    body = problem(response, 422, "idempotency-key-reused")
    assert body["title"] == "Idempotency-Key already used for a different request"
    assert first["id"] not in response.content.decode()
    assert '"n"' not in response.content.decode()
    assert Run.objects.count() == 1


def test_keys_are_scoped_per_caller(client, alice) -> None:
    bob = make_caller("bob", "acme")
    a = submit(client, alice, {"kind": "test.echo", "payload": {"who": "a"}})
    b = submit(client, bob, {"kind": "test.echo", "payload": {"who": "b"}})
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


def test_malformed_json_answers_400(client, alice) -> None:
    body = problem(submit(client, alice, None, raw_body='{"kind": '), 400, "malformed-json")
    assert body["detail"] == "The request body is not valid UTF-8 JSON."
    problem(submit(client, alice, None, raw_body=b"\xff\xfe"), 400, "malformed-json")
    problem(submit(client, alice, None, raw_body='{"kind": NaN}'), 400, "malformed-json")
    assert Run.objects.count() == 0


def test_missing_key_answers_400_with_a_describedby_link(client, alice) -> None:
    response = submit(client, alice, {"kind": "test.echo"}, key=None)
    problem(response, 400, "idempotency-key-missing")
    assert response["Link"] == '</api/openapi.json>; rel="describedby"'
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    ("key", "detail"),
    [
        ("", "An Idempotency-Key is"),
        ("has space", "An Idempotency-Key is"),
        ("k" * 256, "An Idempotency-Key is"),
        ("clé", "An Idempotency-Key is"),
        ('"unterminated', "An Idempotency-Key is"),
        ('"a", "b"', "Send exactly one Idempotency-Key header."),
        ("a,b", "Send exactly one Idempotency-Key header."),
    ],
)
def test_malformed_key_answers_400(client, alice, key, detail) -> None:
    body = problem(
        submit(client, alice, {"kind": "test.echo"}, key=key), 400, "idempotency-key-invalid"
    )
    assert body["detail"].startswith(detail)
    assert Run.objects.count() == 0


def test_quoted_sf_string_key_is_the_same_key_as_bare(client, alice) -> None:
    first = submit(client, alice, {"kind": "test.echo"}, key='"8e03978e-40d5"')
    assert first.status_code == 201
    assert IdempotencyKey.objects.get().key == "8e03978e-40d5"
    again = submit(client, alice, {"kind": "test.echo"}, key="8e03978e-40d5")
    assert (again.status_code, again["Idempotent-Replayed"]) == (201, "true")
    # sf-string escapes: \" and \\ stand for themselves.
    escaped = submit(client, alice, {"kind": "test.echo"}, key=r'"a\"b\\c"')
    assert escaped.status_code == 201
    assert IdempotencyKey.objects.filter(key='a"b\\c').exists()


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ([1], [{"pointer": "", "detail": "the body must be a JSON object"}]),
        ({}, [{"pointer": "/kind", "detail": "is required"}]),
        (
            {"kind": "test.echo", "colour": "red"},
            [{"pointer": "/colour", "detail": "unknown field"}],
        ),
        (
            {"kind": 7, "priority": True},
            [
                {"pointer": "/kind", "detail": "must be a string, got number"},
                {
                    "pointer": "/priority",
                    "detail": "must be an integer or a class name, got boolean",
                },
            ],
        ),
        (
            {"kind": "test.echo", "priority": "urgent"},
            [
                {
                    "pointer": "/priority",
                    "detail": "must be an integer or one of interactive, async, maintenance",
                }
            ],
        ),
        (
            {"kind": "test.echo", "scheduled_for": "2030-01-01T09:00:00"},
            [
                {
                    "pointer": "/scheduled_for",
                    "detail": "must be an RFC 3339 date-time with a UTC offset, "
                    "e.g. 2030-01-01T09:00:00Z",
                }
            ],
        ),
        (
            {"kind": "django.tasks"},
            [{"pointer": "/kind", "detail": "kind 'django.tasks' is reserved"}],
        ),
        (
            {"kind": "test.echo", "payload": {"text": "a\u0000b"}},
            [{"pointer": "/payload", "detail": "must not contain NUL characters, at '/text'"}],
        ),
    ],
)
def test_schema_invalid_body_answers_422_listing_errors(client, alice, body, errors) -> None:
    response = submit(client, alice, body)
    assert problem(response, 422, "validation-failed")["errors"] == errors
    assert Run.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_scheduled_for_is_parsed_with_its_offset(client, alice) -> None:
    response = submit(
        client, alice, {"kind": "test.echo", "scheduled_for": "2030-01-01T09:00:00+02:00"}
    )
    assert response.status_code == 201
    assert response.json()["scheduled_for"] == "2030-01-01T07:00:00+00:00"


def test_wrong_content_type_answers_415(client, alice) -> None:
    response = submit(client, alice, {"kind": "test.echo"}, content_type="text/plain")
    problem(response, 415, "unsupported-media-type")
    assert response["Accept-Post"] == "application/json"
    latin = submit(
        client, alice, {"kind": "test.echo"}, content_type="application/json; charset=latin-1"
    )
    problem(latin, 415, "unsupported-media-type")
    utf8 = submit(
        client, alice, {"kind": "test.echo"}, content_type="application/json; charset=UTF-8"
    )
    assert utf8.status_code == 201


def test_unauthenticated_answers_401_with_www_authenticate(client) -> None:
    response = client.post(
        RUNS, data="{}", content_type="application/json", headers={"Idempotency-Key": "k"}
    )
    problem(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="runqueue"'


@pytest.mark.parametrize(
    "authorization",
    ["Bearer rq_000000000000_" + "x" * 43, "Bearer nonsense", "Basic YWxpY2U6cHc=", "Bearer"],
)
def test_bad_token_answers_401_invalid_token(client, alice, authorization) -> None:
    response = client.post(
        RUNS,
        data='{"kind": "test.echo"}',
        content_type="application/json",
        headers={"Authorization": authorization, "Idempotency-Key": "k"},
    )
    problem(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="runqueue", error="invalid_token"'
    assert Run.objects.count() == 0


def test_405_for_other_methods(client, alice) -> None:
    response = client.get(RUNS, headers=alice.headers())
    problem(response, 405, "method-not-allowed")
    assert response["Allow"] == "POST"


def test_unauthenticated_comes_before_everything_else(client) -> None:
    """401 first: no hint about the body, the key or the runs."""
    response = client.post(RUNS, data="not json", content_type="text/plain")
    problem(response, 401, "unauthenticated")


def test_big_numbers_in_the_payload_round_trip(client, alice) -> None:
    payload = {"big": 2**70, "float": 1.5, "nested": [{"a": None}]}
    response = submit(
        client, alice, None, raw_body=json.dumps({"kind": "test.echo", "payload": payload})
    )
    assert response.status_code == 201
    assert Run.objects.get().payload == payload
    assert response.json()["payload"] == payload
    assert RunStatus.QUEUED == response.json()["status"]
