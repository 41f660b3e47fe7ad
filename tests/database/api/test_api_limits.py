"""Body limits, the in-flight 409, and many clients racing one key."""

from __future__ import annotations

import io
import json
import threading

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client, RequestFactory

import runqueue
from runqueue.api import runs
from runqueue.models import IdempotencyKey, Run
from tests.api_helpers import RUNS, ApiCaller, make_caller, problem, submit
from tests.helpers import Worker, is_blocked, wait_until

LIMIT = 64


@pytest.fixture
def small_limit(settings) -> None:
    settings.RUNQUEUE = {
        **settings.RUNQUEUE,
        "API_MAX_BODY_BYTES": LIMIT,
        "SUBMIT_LOCK_TIMEOUT_MS": 300,
    }


@pytest.fixture
def alice(db) -> ApiCaller:
    return make_caller("alice", "acme")


def _body_of(size: int) -> str:
    """A valid submit body of exactly ``size`` bytes."""
    base = json.dumps({"kind": "test.echo", "payload": ""})
    body = json.dumps({"kind": "test.echo", "payload": "x" * (size - len(base))})
    assert len(body.encode()) == size
    return body


@pytest.mark.django_db
def test_body_at_the_limit_passes_and_one_byte_more_is_413(client, alice, small_limit) -> None:
    assert submit(client, alice, None, raw_body=_body_of(LIMIT)).status_code == 201
    response = submit(client, alice, None, raw_body=_body_of(LIMIT + 1), key="key-2")
    assert problem(response, 413, "payload-too-large")["max_bytes"] == LIMIT
    assert Run.objects.count() == 1


class CountingStream(io.RawIOBase):
    """An endless request body that counts what was read from it."""

    def __init__(self) -> None:
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        buffer[:] = b"x" * len(buffer)
        self.served += len(buffer)
        return len(buffer)


@pytest.mark.django_db
def test_read_is_bounded_without_a_content_length(alice, small_limit) -> None:
    """A body with no (or an understated) Content-Length, as ASGI may give:
    the view reads at most limit + 1 bytes and answers 413."""
    request = RequestFactory().post(
        RUNS, data="{}", content_type="application/json", headers=alice.headers("k")
    )
    stream = CountingStream()
    request._stream = stream
    del request.META["CONTENT_LENGTH"]
    response = runs.submit_run(request)
    problem(response, 413, "payload-too-large")
    assert stream.served == LIMIT + 1


@pytest.mark.django_db
def test_asgi_request_with_a_misleading_content_length_gets_413(alice, small_limit) -> None:
    client = AsyncClient()
    # A second Content-Length makes the header unusable; the bounded read decides.
    response = async_to_sync(client.post)(
        RUNS,
        data=_body_of(10 * LIMIT),
        content_type="application/json",
        headers=alice.headers("k", **{"Content-Length": "10"}),
    )
    problem(response, 413, "payload-too-large")
    assert Run.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_same_key_in_flight_answers_409_with_retry_after(alice, small_limit, raw_connect) -> None:
    """While the first request with a key has not committed, a second waits
    SUBMIT_LOCK_TIMEOUT_MS on the key's row, then is told to retry."""
    other = runqueue.submit(kind="test.echo", tenant="acme").run
    first = raw_connect(autocommit=False)
    first.execute(
        "INSERT INTO runqueue_idempotency_key "
        "(tenant, principal, key, request_hash, run_id, outcome, created_at, expires_at) "
        "VALUES ('acme', %s, 'key-1', %s, %s, 'created', now(), now() + interval '1 day')",
        (alice.principal, "0" * 64, other.id),
    )
    response = submit(Client(), alice, {"kind": "test.echo"})
    body = problem(response, 409, "idempotency-request-in-progress")
    assert response["Retry-After"] == "1"
    assert str(other.id) not in json.dumps(body)
    first.rollback()
    # The key was not stored: the retry goes through.
    retry = submit(Client(), alice, {"kind": "test.echo"})
    assert retry.status_code == 201
    assert str(IdempotencyKey.objects.get(key="key-1").run_id) == retry.json()["id"]


N_THREADS = 8


@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_with_one_key_make_one_run(alice) -> None:
    """N clients POST the same body with the same key at once: one run, every
    answer carries its id, all but one are replays."""
    barrier = threading.Barrier(N_THREADS)
    body = json.dumps({"kind": "test.echo", "session_id": "s1", "payload": {"x": 1}})

    def post():
        client = Client()
        barrier.wait()
        response = client.post(
            RUNS, data=body, content_type="application/json", headers=alice.headers("race-1")
        )
        return response.status_code, response.get("Idempotent-Replayed"), response.json()

    workers = [Worker(post, name=f"client-{i}") for i in range(N_THREADS)]
    for w in workers:
        w.start()
    answers = [w.outcome() for w in workers]
    assert {status for status, _, _ in answers} == {201}
    assert len({body["id"] for _, _, body in answers}) == 1
    assert sorted(str(replayed) for _, replayed, _ in answers) == ["None"] + ["true"] * (
        N_THREADS - 1
    )
    assert Run.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_second_key_waits_for_the_first_then_replays(alice, raw_connect) -> None:
    """A same-key request blocked behind an uncommitted first one replays it
    once the first commits (within SUBMIT_LOCK_TIMEOUT_MS)."""
    run = runqueue.submit(kind="test.echo", tenant="acme").run
    first = raw_connect(autocommit=False)
    first.execute(
        "INSERT INTO runqueue_idempotency_key "
        "(tenant, principal, key, request_hash, run_id, outcome, created_at, expires_at) "
        "SELECT 'acme', %s, 'key-1', request_hash, %s, 'created', now(), "
        "now() + interval '1 day' FROM (SELECT %s::text AS request_hash) h",
        (alice.principal, run.id, _hash_of_echo()),
    )
    waiter = Worker(lambda: submit(Client(), alice, {"kind": "test.echo"}), name="second")
    waiter.start()
    wait_until(lambda: waiter.backend_pid and is_blocked(waiter.backend_pid), what="blocked")
    first.commit()
    response = waiter.outcome()
    assert (response.status_code, response["Idempotent-Replayed"]) == (201, "true")
    assert response.json()["id"] == str(run.id)


def _hash_of_echo() -> str:
    """The request hash of ``{"kind": "test.echo"}`` (tenant and principal are
    not part of it): read back from a submit in another tenant."""
    runqueue.submit(kind="test.echo", payload={}, tenant="probe", idempotency_key="probe")
    return IdempotencyKey.objects.get(tenant="probe").request_hash


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"API_MAX_BODY_BYTES": 0}, "RUNQUEUE['API_MAX_BODY_BYTES'] is out of range: 0"),
        ({"API_MAX_BODY_BYTES": 1.5}, "RUNQUEUE['API_MAX_BODY_BYTES'] must be an integer"),
        ({"API_SESSION_TENANT": ""}, "RUNQUEUE['API_SESSION_TENANT'] must be a 1-255"),
        ({"API_EVENTS_PAGE_SIZE": 1001}, "RUNQUEUE['API_EVENTS_PAGE_SIZE'] must be at most 1000"),
    ],
)
def test_api_settings_are_validated(raw, message) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from runqueue.conf import parse

    with pytest.raises(ImproperlyConfigured) as excinfo:
        parse(raw)
    assert str(excinfo.value).startswith(message)
