"""Every write endpoint of the API (submit, cancel, signal, answer) is
bounded as a submit is: the token's quota counts each one, a token may write
only to runs of kinds the API admits, and a signal's data and a run's kept
signals have limits. And a run that asks the user (``ctx.ask_user``) is
answered through its own endpoint whatever its session, its question shown
in its representation (issue 37 item 2, issue 32 item 9)."""

from __future__ import annotations

import json

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.leases.outcomes import Suspended
from runqueue.models import EventLog, PriorityClass, Run, RunStatus, Signal
from tests.api_helpers import ApiCaller, make_caller, problem, submit

pytestmark = pytest.mark.django_db

QUESTION = {"question": "Which day?"}  # what tests/handlers.py's test.ask asks


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


def _post(client, caller: ApiCaller, url: str, body: object = None):
    data = "" if body is None else json.dumps(body)
    return client.generic(
        "POST", url, data, content_type="application/json", headers=caller.headers()
    )


def _signal(client, caller: ApiCaller, run_id, name: str = "go", body: object = None):
    return _post(client, caller, f"/api/runs/{run_id}/signals/{name}/", body)


def _answer(client, caller: ApiCaller, run_id, body: object = None):
    return _post(client, caller, f"/api/runs/{run_id}/input/", body)


def _cancel(client, caller: ApiCaller, run_id):
    return _post(client, caller, f"/api/runs/{run_id}/cancel/", {"reason": "r"})


def _asking(caller: ApiCaller, session_id: str | None = None) -> Run:
    """A test.ask run, run by its real handler until it waits for the user."""
    response = None
    if session_id is None:
        run = runqueue.submit(kind="test.ask", tenant=caller.tenant, principal=caller.principal)
        run_id = run.run.id
    else:
        from django.test import Client

        body = {"kind": "test.ask", "session_id": session_id}
        response = submit(Client(), caller, body, key=f"ask-{session_id}")
        assert response.status_code == 201, response.content
        run_id = response.json()["id"]
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert lease is not None and str(lease.run_id) == str(run_id)
    assert testing.execute(lease) == "waiting"
    return Run.objects.get(id=run_id)


def _finish(run_id) -> dict:
    """Claim the resumed run, run its handler again; its result."""
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert lease is not None and lease.run_id == run_id
    assert testing.execute(lease) == "succeeded"
    return Run.objects.get(id=run_id).result


# --- ask_user without a session (issue 32 item 9) ----------------------------


def test_a_sessionless_ask_user_shows_its_question_and_takes_the_answer(client, alice) -> None:
    run = _asking(alice)
    shown = client.get(f"/api/runs/{run.id}/", headers=alice.headers()).json()
    assert shown["status"] == "waiting_for_user"
    assert shown["wait"]["reason"] == "user"
    assert shown["wait"]["question"] == QUESTION
    assert shown["links"]["input"] == f"/api/runs/{run.id}/input/"

    answered = _answer(client, alice, run.id, {"day": "Tuesday"})
    assert answered.status_code == 202, answered.content
    body = answered.json()
    assert body["status"] == "queued" and body["input"] == {"day": "Tuesday"}
    assert body["wait"] is None and "input" not in body["links"]
    assert EventLog.objects.filter(run_id=run.id, type="run.input_delivered").count() == 1
    assert not Signal.objects.exists()  # delivered, not kept in a mailbox
    assert _finish(run.id) == {"answer": {"day": "Tuesday"}, "state": {"asked": True}}


def test_a_session_run_is_answered_by_its_own_endpoint_too(client, alice) -> None:
    run = _asking(alice, session_id="conv-1")
    assert _answer(client, alice, run.id, "yes").status_code == 202
    assert _finish(run.id) == {"answer": "yes", "state": {"asked": True}}


def test_an_answer_to_a_run_that_does_not_wait_for_the_user_is_409(client, alice) -> None:
    run = _asking(alice)
    assert _answer(client, alice, run.id, 1).status_code == 202
    again = problem(_answer(client, alice, run.id, 2), 409, "run-not-waiting-for-user")
    assert again["run_status"] == "queued"
    assert Run.objects.get(id=run.id).input == 1  # the first answer stands
    other = make_caller("mallory", "globex")
    assert _answer(client, other, run.id, 3).status_code == 404


def _keyed_answer(client, caller: ApiCaller, run_id, body: object, key: str):
    return client.generic(
        "POST",
        f"/api/runs/{run_id}/input/",
        json.dumps(body),
        content_type="application/json",
        headers=caller.headers(key),
    )


def test_an_answer_retried_with_its_idempotency_key_gets_the_first_response(client, alice) -> None:
    """Issue 47 item 4: the same answer with the same Idempotency-Key was
    202 then 409. A retry is the first response again, marked replayed; the
    key with another answer, or on another run, is a conflict; the key is
    the submit's (one store): a submit reusing it is a conflict too."""
    run, other = _asking(alice), _asking(alice)
    first = _keyed_answer(client, alice, run.id, {"day": "Tuesday"}, "answer-1")
    assert first.status_code == 202, first.content
    assert "Idempotent-Replayed" not in first
    again = _keyed_answer(client, alice, run.id, {"day": "Tuesday"}, "answer-1")
    assert again.status_code == 202, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"]
    assert again.json()["id"] == str(run.id) and again.json()["input"] == {"day": "Tuesday"}
    assert EventLog.objects.filter(run_id=run.id, type="run.input_delivered").count() == 1
    problem(
        _keyed_answer(client, alice, run.id, {"day": "Friday"}, "answer-1"),
        422,
        "idempotency-key-reused",
    )
    problem(
        _keyed_answer(client, alice, other.id, {"day": "Tuesday"}, "answer-1"),
        422,
        "idempotency-key-reused",
    )
    assert Run.objects.get(id=other.id).status == RunStatus.WAITING_FOR_USER
    problem(
        submit(client, alice, {"kind": "test.echo"}, key="answer-1"), 422, "idempotency-key-reused"
    )
    # Another caller's key of the same name is its own.
    bob = make_caller("bob", "acme")
    assert _keyed_answer(client, bob, other.id, "x", "answer-1").status_code == 202
    assert _finish(run.id) == {"answer": {"day": "Tuesday"}, "state": {"asked": True}}


def test_the_openapi_document_describes_the_answer_and_the_question(client) -> None:
    document = client.get("/api/openapi.json").json()
    assert "post" in document["paths"]["/api/runs/{run_id}/input/"]
    wait = document["components"]["schemas"]["Wait"]["properties"]
    assert "question" in wait
    links = document["components"]["schemas"]["Run"]["properties"]["links"]["properties"]
    assert "input" in links


# --- quotas and permissions on every write (issue 37 item 2) -----------------


def _waiting_for_signal(caller: ApiCaller) -> Run:
    runqueue.submit(kind="test.echo", tenant=caller.tenant, principal=caller.principal)
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    assert leases.write(lease, Suspended(reason="signal", wait_name="go", timeout=60))
    return Run.objects.get(id=lease.run_id)


def test_a_token_with_quota_zero_writes_nothing(client) -> None:
    """docs/api.md: a quota of 0 stops the token. It could still cancel and signal."""
    stopped = make_caller("gail", "acme", submit_quota=0, submit_window_seconds=30)
    run = _waiting_for_signal(stopped)
    asking = _asking(stopped)
    for response in (
        _cancel(client, stopped, run.id),
        _signal(client, stopped, run.id, "go", {"n": 1}),
        _signal(client, stopped, run.id, "other", {"n": 1}),
        _answer(client, stopped, asking.id, "yes"),
    ):
        assert problem(response, 429, "rate-limited")["quota"] == 0
        assert response["Retry-After"] == "30"
    assert Run.objects.get(id=run.id).status == RunStatus.WAITING
    assert Run.objects.get(id=asking.id).status == RunStatus.WAITING_FOR_USER
    assert not Signal.objects.exists()
    # Reads are not writes.
    assert client.get(f"/api/runs/{run.id}/", headers=stopped.headers()).status_code == 200


def test_every_write_counts_against_one_quota(client) -> None:
    caller = make_caller("erin", "acme", submit_quota=3, submit_window_seconds=60)
    run = _waiting_for_signal(caller)
    assert _signal(client, caller, run.id, "a").status_code == 202
    assert _signal(client, caller, run.id, "b").status_code == 202
    assert submit(client, caller, {"kind": "test.echo"}).status_code == 201
    problem(_cancel(client, caller, run.id), 429, "rate-limited")
    problem(_signal(client, caller, run.id, "c"), 429, "rate-limited")
    assert Run.objects.get(id=run.id).status == RunStatus.WAITING
    assert Signal.objects.count() == 2


@pytest.mark.parametrize("kind", ["test.wait_signal", "runqueue.bulk", "django.tasks"])
def test_a_token_writes_only_to_runs_of_kinds_the_api_admits(client, alice, kind) -> None:
    """A run the project submitted from Python, of a kind the API may not
    submit (its maintenance runs, its tasks), is read-only over the API."""
    run = Run.objects.create(kind=kind, tenant=alice.tenant, concurrency_key=alice.tenant)
    for response in (_cancel(client, alice, run.id), _signal(client, alice, run.id)):
        body = problem(response, 403, "run-not-writable")
        assert body["kind"] == kind
    assert Run.objects.get(id=run.id).status == RunStatus.QUEUED
    assert not Signal.objects.exists()
    assert client.get(f"/api/runs/{run.id}/", headers=alice.headers()).status_code == 200


def test_a_child_of_a_writable_run_is_writable(client, alice) -> None:
    from runqueue import runtime

    runqueue.submit(kind="test.echo", tenant=alice.tenant, principal=alice.principal)
    lease = leases.claim_one("w", [PriorityClass.INTERACTIVE])
    child = runtime.build_context(lease).spawn("test.wait_signal", priority=PriorityClass.ASYNC)
    assert _signal(client, alice, child, "go").status_code == 202


# --- a signal's size and a run's kept signals --------------------------------


def test_a_signal_over_the_size_limit_is_413(client, alice, settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "SIGNAL_MAX_BYTES": 1000}
    run = _waiting_for_signal(alice)
    fits = {"s": "x" * (1000 - len('{"s": ""}'))}
    big = {"s": "x" * 1000}
    assert _signal(client, alice, run.id, "other", fits).status_code == 202
    body = problem(_signal(client, alice, run.id, "other", big), 413, "signal-too-large")
    assert body["max_bytes"] == 1000
    # Delivered or kept, the limit is the same.
    problem(_signal(client, alice, run.id, "go", big), 413, "signal-too-large")
    assert Signal.objects.count() == 1
    assert Run.objects.get(id=run.id).status == RunStatus.WAITING
    with pytest.raises(runqueue.InvalidArgument, match="at most 1000 bytes"):
        runqueue.signal(run.id, "other", big)


def test_a_full_mailbox_is_429_and_a_delivery_still_passes(client, alice, settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "SIGNALS_KEPT_MAX": 3}
    run = _waiting_for_signal(alice)
    for i in range(3):
        assert _signal(client, alice, run.id, f"s{i}").json()["delivery"] == "kept"
    body = problem(_signal(client, alice, run.id, "s3"), 429, "mailbox-full")
    assert body["max_kept"] == 3
    assert Signal.objects.count() == 3
    # The signal the run waits for is delivered, not kept: no room needed.
    assert _signal(client, alice, run.id, "go").json()["delivery"] == "delivered"
    with pytest.raises(runqueue.MailboxFull):
        runqueue.signal(run.id, "s4")


def test_the_signal_limits_are_settings_with_defaults(settings) -> None:
    from runqueue.conf import get_settings

    conf = get_settings()
    assert (conf.SIGNAL_MAX_BYTES, conf.SIGNALS_KEPT_MAX) == (65536, 100)
    from django.core.exceptions import ImproperlyConfigured

    settings.RUNQUEUE = {**settings.RUNQUEUE, "SIGNALS_KEPT_MAX": 0}
    with pytest.raises(ImproperlyConfigured, match="SIGNALS_KEPT_MAX"):
        get_settings()


def test_pause_and_resume_over_the_api(client, alice) -> None:
    run = runqueue.submit(kind="test.echo", tenant=alice.tenant, principal=alice.principal).run
    response = _post(client, alice, f"/api/runs/{run.id}/pause/", {"reason": "hold", "tree": True})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["paused_at"] is not None and body["links"]["resume"].endswith("/resume/")
    assert leases.claim_one("w", [PriorityClass.INTERACTIVE]) is None
    again = _post(client, alice, f"/api/runs/{run.id}/pause/")
    assert again.status_code == 200  # a retry: still paused, nothing more written
    assert EventLog.objects.filter(run_id=run.id, type="run.paused").count() == 1
    resumed = _post(client, alice, f"/api/runs/{run.id}/resume/")
    assert resumed.status_code == 200 and resumed.json()["paused_at"] is None
    assert leases.claim_one("w", [PriorityClass.INTERACTIVE]).run_id == run.id


def test_pause_refusals_over_the_api(client, alice) -> None:
    run = runqueue.submit(kind="test.echo", tenant=alice.tenant, principal=alice.principal).run
    for bad in ({"tree": "yes"}, {"why": "x"}, {"reason": 5}):
        response = _post(client, alice, f"/api/runs/{run.id}/pause/", bad)
        assert response.status_code == 422, response.content
    mallory = make_caller("mallory", "other")
    assert _post(client, mallory, f"/api/runs/{run.id}/pause/").status_code == 404
    assert Run.objects.get(id=run.id).paused_at is None
    runqueue.cancel(run.id, reason="done", actor="t")
    assert _post(client, alice, f"/api/runs/{run.id}/pause/").status_code == 409
