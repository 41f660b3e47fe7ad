"""Inbound events: recorded once per key, the runs their triggers start,
the waits they end (one that began after the event too), and the door
(``POST /api/events/<name>/``): authenticated, bounded, signed, idempotent,
tenant-scoped; bad input writes nothing."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import Client

import runqueue
from runqueue import leases, registry, testing
from runqueue.events import inbound as events_in
from runqueue.leases.outcomes import Suspended
from runqueue.models import (
    EventDelivery,
    EventLog,
    EventTrigger,
    InboundEvent,
    PriorityClass,
    Run,
)
from tests.api_helpers import ApiCaller, make_caller, problem
from tests.helpers import Worker, is_blocked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

INTER = PriorityClass.INTERACTIVE
SECRET = "a-shared-secret-of-the-sender"


@pytest.fixture(autouse=True)
def _accepted(settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_EVENTS": ["paid", "signed", "keyed"]}
    settings.EVENT_TEST_SECRET = SECRET
    yield
    for name in ("paid", "signed", "keyed"):
        registry.remove_event_triggers(name)


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


@pytest.fixture
def mallory() -> ApiCaller:
    return make_caller("mallory", "globex")


def _post(client: Client, caller: ApiCaller, name: str, body, *, key: str | None, **headers):
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(
        f"/api/events/{name}/",
        data=raw,
        content_type="application/json",
        headers=caller.headers(key, **headers),
    )


def _waiting(payload: dict, tenant: str = "default") -> leases.Lease:
    """A run of test.wait_event, claimed: its first turn returns the wait."""
    runqueue.submit(kind="test.wait_event", payload=payload, tenant=tenant)
    lease = leases.claim_one("w", [INTER])
    assert lease is not None
    return lease


def _resumes(run_id) -> int:
    return EventLog.objects.filter(run_id=run_id, type="run.resumed").count()


# --- the door: a burst with duplicates -----------------------------------------


def test_a_burst_with_duplicates_starts_one_run_per_event_and_trigger(alice) -> None:
    """Eight threads post six events four times each: six events, one run
    per event for the code trigger and one per matching event for the
    admin's; every other delivery is a replay."""
    registry.on_event("paid", kind="test.echo")
    EventTrigger.objects.create(name="paid", match={"plan": "pro"}, kind="test.echo")
    EventTrigger.objects.create(name="paid", match={}, kind="test.echo", tenant="globex")
    deliveries = [(f"evt-{i}", {"order": i, "plan": "pro" if i % 2 else "free"}) for i in range(6)]
    work = deliveries * 4
    barrier = threading.Barrier(8)
    lock = threading.Lock()
    answers: list[int] = []

    def poster(share: list) -> None:
        client = Client()
        barrier.wait(10)
        for key, body in share:
            status = _post(client, alice, "paid", body, key=key).status_code
            with lock:
                answers.append(status)

    workers = [Worker(lambda s=work[i::8]: poster(s), name=f"poster-{i}") for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.outcome()
    assert sorted(answers) == [200] * 18 + [201] * 6
    assert InboundEvent.objects.count() == 6
    runs = list(Run.objects.filter(kind="test.echo"))
    assert len(runs) == 6 + 3  # the code trigger's six, the admin's three "pro"
    assert {r.tenant for r in runs} == {"acme"}
    by_event = {e.key: e.started for e in InboundEvent.objects.all()}
    assert all(len(started) == (2 if int(k[-1]) % 2 else 1) for k, started in by_event.items())
    payloads = {r.payload["key"] for r in runs}
    assert payloads == {k for k, _ in deliveries}


# --- waits ---------------------------------------------------------------------


def test_a_wait_for_an_event_that_arrived_before_it_ends_at_once() -> None:
    sent = runqueue.send_event("paid", {"order": 7, "total": 40}, key="evt-7")
    assert not sent.replayed and sent.woken == []
    run = runqueue.submit(kind="test.wait_event", payload={"match": {"order": 7}}).run
    assert testing.execute(leases.claim_one("w", [INTER])) == "waiting"
    queued = Run.objects.get(id=run.id)
    assert (queued.status, queued.wait_reason, queued.wait_match) == ("queued", "", None)
    assert testing.execute(leases.claim_one("w", [INTER])) == "succeeded"
    result = Run.objects.get(id=run.id).result
    assert result["timed_out"] is False
    assert result["input"]["data"] == {"order": 7, "total": 40}
    assert (result["input"]["name"], result["input"]["key"]) == ("paid", "evt-7")
    assert EventDelivery.objects.filter(run_id=run.id).count() == 1


def test_a_match_that_does_not_fit_does_not_wake_and_an_event_is_taken_once() -> None:
    lease = _waiting({"match": {"order": 7}})
    wait = Suspended(reason="event", wait_name="paid", match={"order": 7}, state={"w": 1})
    assert leases.write(lease, wait)
    assert runqueue.send_event("paid", {"order": 8}, key="evt-8").woken == []
    assert runqueue.send_event("other", {"order": 7}, key="evt-o").woken == []
    assert Run.objects.get(id=lease.run_id).status == "waiting"
    woke = runqueue.send_event("paid", {"order": 7, "extra": True}, key="evt-7")
    assert woke.woken == [lease.run_id]
    run = Run.objects.get(id=lease.run_id)
    assert run.status == "queued" and run.input["key"] == "evt-7"
    # Waiting again with the same match: the event it took is not taken twice.
    again = leases.claim_one("w", [INTER])
    assert leases.write(again, wait)
    assert Run.objects.get(id=lease.run_id).status == "waiting"
    assert _resumes(lease.run_id) == 1
    assert runqueue.send_event("paid", {"order": 7}, key="evt-7b").woken == [lease.run_id]
    assert testing.stuck_waits() == []


def test_an_event_past_the_retention_is_neither_taken_nor_kept() -> None:
    runqueue.send_event("paid", {"order": 1}, key="old")
    InboundEvent.objects.update(received_at=Now() - dt.timedelta(days=2))
    lease = _waiting({})
    assert leases.write(lease, Suspended(reason="event", wait_name="paid", match={}))
    assert Run.objects.get(id=lease.run_id).status == "waiting"
    assert events_in.prune() == 1
    assert not InboundEvent.objects.exists()
    # Pruned, the key is new again: a late delivery is a new event.
    assert runqueue.send_event("paid", {"order": 1}, key="old").woken == [lease.run_id]


def test_a_wait_for_an_event_times_out() -> None:
    run = runqueue.submit(kind="test.wait_event", payload={"timeout": 0.2}).run
    assert testing.execute(leases.claim_one("w", [INTER])) == "waiting"
    assert Run.objects.get(id=run.id).wait_reason == "event"
    deadline = time.monotonic() + 30
    while Run.objects.get(id=run.id).status != "queued":
        assert time.monotonic() < deadline, "the deadline never fired"
        leases.resume_due()
        time.sleep(0.05)
    assert testing.execute(leases.claim_one("w", [INTER])) == "succeeded"
    assert Run.objects.get(id=run.id).result == {"input": None, "timed_out": True}


def test_waits_and_triggers_stay_in_their_tenant() -> None:
    theirs = _waiting({}, tenant="globex")
    assert leases.write(theirs, Suspended(reason="event", wait_name="paid", match={}))
    EventTrigger.objects.create(name="paid", kind="test.echo", tenant="globex")
    sent = runqueue.send_event("paid", {"order": 1}, key="k", tenant="acme")
    assert sent.woken == [] and sent.started == []
    assert Run.objects.get(id=theirs.run_id).status == "waiting"
    # The same key in another tenant is another event.
    other = runqueue.send_event("paid", {"order": 2}, key="k", tenant="globex")
    assert not other.replayed and other.woken == [theirs.run_id] and len(other.started) == 1


# --- the race: an event while the wait is being written ------------------------


def _event_wait(lease: leases.Lease, match: dict | None = None) -> bool:
    wait = Suspended(reason="event", wait_name="paid", match=match or {"n": 1})
    return leases.write(lease, wait)


def test_an_event_in_flight_while_the_wait_is_written_is_taken_by_the_wait(monkeypatch) -> None:
    """The event's transaction has its row and holds the name's lock shared
    (its trigger runs); the wait blocks on the lock, then sees the event."""
    inside, release = threading.Event(), threading.Event()

    def slow_payload(event: dict) -> dict:
        inside.set()
        assert release.wait(30)
        return event

    registry.on_event("paid", kind="test.echo", payload=slow_payload)
    lease = _waiting({})
    sender = Worker(lambda: runqueue.send_event("paid", {"n": 1}, key="e1"), name="sender")
    sender.start()
    assert inside.wait(30)
    waiter = Worker(lambda: _event_wait(lease), name="waiter")
    waiter.start()
    wait_until(lambda: waiter.backend_pid and is_blocked(waiter.backend_pid), what="wait blocks")
    release.set()
    assert sender.outcome().woken == []  # it committed first: the run was not waiting yet
    assert waiter.outcome() is True
    run = Run.objects.get(id=lease.run_id)
    assert (run.status, run.input["key"]) == ("queued", "e1")
    assert EventDelivery.objects.filter(run_id=run.id).count() == 1 and _resumes(run.id) == 1


def test_an_event_sent_while_the_wait_is_written_finds_the_run_waiting(monkeypatch) -> None:
    """The wait's transaction has written the run waiting but not committed;
    the event blocks on the name's lock, then finds the run waiting."""
    from runqueue.leases import waits

    written, release = threading.Event(), threading.Event()
    real = waits.execute

    def pausing(cursor, name, params):
        result = real(cursor, name, params)
        if name == "suspend" and threading.current_thread().name == "waiter":
            written.set()
            assert release.wait(30)
        return result

    monkeypatch.setattr(waits, "execute", pausing)
    lease = _waiting({})
    waiter = Worker(lambda: _event_wait(lease), name="waiter")
    waiter.start()
    assert written.wait(30)
    sender = Worker(lambda: runqueue.send_event("paid", {"n": 1}, key="e1"), name="sender")
    sender.start()
    wait_until(lambda: sender.backend_pid and is_blocked(sender.backend_pid), what="event blocks")
    release.set()
    assert waiter.outcome() is True
    assert sender.outcome().woken == [lease.run_id]
    run = Run.objects.get(id=lease.run_id)
    assert (run.status, run.input["key"]) == ("queued", "e1")
    assert EventDelivery.objects.filter(run_id=run.id).count() == 1 and _resumes(run.id) == 1


@pytest.mark.parametrize("event_first", [True, False])
def test_an_event_racing_the_wait_is_delivered_once(event_first: bool) -> None:
    """Many interleavings, released together: the run resumes once, with the
    event, whichever commits first. (Each round's wait matches its own
    event: an earlier round's is within the retention window too.)"""
    for i in range(20):
        lease = _waiting({})
        barrier = threading.Barrier(2)

        def send(i=i, barrier=barrier) -> object:
            barrier.wait(10)
            return runqueue.send_event("paid", {"n": 1, "i": i}, key=f"e-{event_first}-{i}")

        def park(lease=lease, i=i, barrier=barrier) -> object:
            barrier.wait(10)
            return _event_wait(lease, {"i": i})

        pair = [Worker(send, name="s"), Worker(park, name="p")]
        for w in pair if event_first else reversed(pair):
            w.start()
        for w in pair:
            w.outcome()
        run = Run.objects.get(id=lease.run_id)
        assert (run.status, run.input["data"]["i"]) == ("queued", i), i
        assert _resumes(run.id) == 1
        assert EventDelivery.objects.filter(run_id=run.id).count() == 1
        runqueue.cancel(run.id, reason="next", actor="t")


# --- the door: what it refuses -------------------------------------------------


def test_a_signature_check_accepts_a_signed_body_and_refuses_others(
    client, alice, settings
) -> None:
    check = events_in.hmac_sha256("EVENT_TEST_SECRET", header="X-Hub-Signature-256")
    settings.RUNQUEUE = {**settings.RUNQUEUE, "EVENT_VERIFIERS": {"signed": check}}
    body = json.dumps({"order": 1}).encode()
    good = events_in.sign(SECRET, body)
    refused = [
        _post(client, alice, "signed", body, key="s1"),
        _post(client, alice, "signed", body, key="s1", **{"X-Hub-Signature-256": "sha256=00"}),
        _post(client, alice, "signed", b'{"order": 2}', key="s1", **{"X-Hub-Signature-256": good}),
    ]
    for response in refused:
        problem(response, 401, "event-signature-invalid")
    assert not InboundEvent.objects.exists()
    ok = _post(client, alice, "signed", body, key="s1", **{"X-Hub-Signature-256": good})
    assert ok.status_code == 201, ok.content
    assert InboundEvent.objects.get().data == {"order": 1}


def test_bad_input_gets_a_clear_4xx_and_writes_nothing(client, alice, settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "EVENT_MAX_BYTES": 100}
    problem(_post(client, alice, "nope", {"a": 1}, key="k"), 404, "event-not-accepted")
    problem(_post(client, alice, "paid", {"a": "x" * 200}, key="k"), 413, "payload-too-large")
    problem(_post(client, alice, "paid", "{nope", key="k"), 400, "malformed-json")
    problem(_post(client, alice, "paid", [1, 2], key="k"), 422, "validation-failed")
    problem(_post(client, alice, "paid", {"a": 1}, key=None), 400, "idempotency-key-missing")
    problem(_post(client, alice, "paid", {"a": 1}, key="a b"), 400, "idempotency-key-invalid")
    problem(_post(client, alice, "paid", {"a": "\u0000"}, key="k"), 422, "validation-failed")
    anonymous = client.post("/api/events/paid/", data="{}", content_type="application/json")
    problem(anonymous, 401, "unauthenticated")
    problem(client.get("/api/events/paid/", headers=alice.headers()), 405, "method-not-allowed")
    assert not InboundEvent.objects.exists() and not Run.objects.exists()
    assert _post(client, alice, "paid", {"a": 1}, key="k").status_code == 201
    problem(_post(client, alice, "paid", {"a": 2}, key="k"), 422, "idempotency-key-reused")
    assert InboundEvent.objects.get().data == {"a": 1}


def test_a_body_member_can_be_the_key_and_a_failing_trigger_records_nothing(
    client, alice, settings
) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "EVENT_KEY_FIELDS": {"keyed": "id"}}
    first = _post(client, alice, "keyed", {"id": "evt_123", "n": 1}, key=None)
    again = _post(client, alice, "keyed", {"id": "evt_123", "n": 1}, key=None)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert InboundEvent.objects.get().key == "evt_123"
    EventTrigger.objects.create(name="paid", kind="no.such.kind")
    broken = _post(client, alice, "paid", {"n": 1}, key="k2")
    problem(broken, 500, "event-trigger-failed")
    assert InboundEvent.objects.filter(name="paid").count() == 0


def test_events_count_against_the_tokens_quota(client) -> None:
    limited = make_caller("quota", "acme", submit_quota=1, submit_window_seconds=3600)
    assert _post(client, limited, "paid", {"a": 1}, key="q1").status_code == 201
    problem(_post(client, limited, "paid", {"a": 1}, key="q2"), 429, "rate-limited")
    assert InboundEvent.objects.count() == 1


def test_an_event_belongs_to_the_tokens_tenant(client, alice, mallory) -> None:
    theirs = _waiting({}, tenant="globex")
    assert leases.write(theirs, Suspended(reason="event", wait_name="paid", match={}))
    assert _post(client, alice, "paid", {"a": 1}, key="same").status_code == 201
    assert Run.objects.get(id=theirs.run_id).status == "waiting"
    assert _post(client, mallory, "paid", {"a": 9}, key="same").status_code == 201
    assert Run.objects.get(id=theirs.run_id).input["data"] == {"a": 9}
    tenants = sorted(InboundEvent.objects.values_list("tenant", flat=True))
    assert tenants == ["acme", "globex"]


def test_wait_for_event_refuses_a_bad_name_or_match() -> None:
    lease = _waiting({})
    ctx = runqueue.RunContext(lease, state=None, tool_seq=0, recorded={})
    with pytest.raises(ValueError, match="must not be empty"):
        ctx.wait_for_event("")
    with pytest.raises(ValueError, match="JSON object"):
        ctx.wait_for_event("paid", match=[1])  # type: ignore[arg-type]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


# --- the admin -------------------------------------------------------------------


def test_the_admin_saves_a_trigger_only_with_a_match_and_a_kind_it_can_use(client) -> None:
    from tests.admin_support import staff

    client.force_login(
        staff("ops", "add_eventtrigger", "view_eventtrigger", "view_inboundevent", "view_run")
    )
    url = "/admin/runqueue/eventtrigger/add/"
    form = {"name": "paid", "match": '{"plan": "pro"}', "kind": "test.echo", "priority": 10}
    bad = [
        {**form, "match": "[1, 2]"},
        {**form, "kind": "no.such.kind"},
        {**form, "kind": "runqueue.prune_signals"},
        {**form, "name": ""},
    ]
    for fields in bad:
        response = client.post(url, {**fields, "enabled": "on"})
        assert response.status_code == 200, fields  # the form again, with its error
    assert not EventTrigger.objects.exists()
    assert client.post(url, {**form, "enabled": "on"}).status_code == 302
    assert EventTrigger.objects.get().match == {"plan": "pro"}
    sent = runqueue.send_event("paid", {"plan": "pro"}, key="k1", tenant="acme")
    page = client.get(f"/admin/runqueue/inboundevent/{sent.event.id}/change/")
    assert page.status_code == 200
    assert str(sent.started[0]) in page.content.decode()  # the run it started, linked
