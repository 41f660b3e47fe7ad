"""runqueue.submit: idempotency keys first, then session routing."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.utils import timezone

import runqueue
from runqueue import leases
from runqueue.errors import (
    ActiveRunConflict,
    IdempotencyConflict,
    InvalidSubmission,
)
from runqueue.models import EventLog, IdempotencyKey, PriorityClass, Run, RunStatus
from tests.helpers import Worker, event_types

pytestmark = pytest.mark.django_db


def test_submit_creates_a_queued_run_with_its_event() -> None:
    sub = runqueue.submit(kind="chat.turn", payload={"text": "hi"}, session_id="s1")
    assert sub.outcome == "created"
    run = Run.objects.get(id=sub.run.id)
    assert (run.status, run.kind, run.payload, run.session_id) == (
        RunStatus.QUEUED,
        "chat.turn",
        {"text": "hi"},
        "s1",
    )
    assert (run.attempts, run.max_attempts, run.lease_epoch) == (0, 3, 0)
    assert event_types(run.id) == ["run.created"]


def test_public_name_is_the_function() -> None:
    assert callable(runqueue.submit)
    assert runqueue.submit.__module__ == "runqueue.submission.submit"


def test_same_key_same_request_returns_the_original_run() -> None:
    first = runqueue.submit(kind="k", payload={"a": 1, "b": 2}, idempotency_key="key-1")
    # Key order in the payload does not change the request.
    again = runqueue.submit(kind="k", payload={"b": 2, "a": 1}, idempotency_key="key-1")
    assert again.outcome == "replayed"
    assert again.original_outcome == "created"
    assert again.run.id == first.run.id
    assert Run.objects.count() == 1


def test_replay_returns_the_run_whatever_its_status_now() -> None:
    first = runqueue.submit(kind="k", session_id="s1", idempotency_key="key-1")
    runqueue.cancel(first.run.id, reason="test", actor="tester")
    again = runqueue.submit(kind="k", session_id="s1", idempotency_key="key-1")
    assert (again.outcome, again.run.id, again.run.status) == (
        "replayed",
        first.run.id,
        RunStatus.CANCELLED,
    )


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"a": 2}},
        {"kind": "other"},
        {"session_id": "s2"},
        {"priority": 10},
        {"scheduled_for": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)},
    ],
)
def test_same_key_different_request_is_a_conflict(change: dict) -> None:
    base = {"kind": "k", "payload": {"a": 1}, "session_id": "s1"}
    runqueue.submit(**base, idempotency_key="key-1")
    with pytest.raises(IdempotencyConflict) as excinfo:
        runqueue.submit(**(base | change), idempotency_key="key-1")
    assert excinfo.value.key == "key-1"
    assert Run.objects.count() == 1


def test_idempotency_lookup_comes_before_the_session_check() -> None:
    """A retry of the request that created the live run gets it back, not a conflict."""
    first = runqueue.submit(kind="k", session_id="s1", idempotency_key="key-1")
    again = runqueue.submit(kind="k", session_id="s1", idempotency_key="key-1")
    assert (again.outcome, again.run.id) == ("replayed", first.run.id)


def test_key_is_scoped_to_tenant_and_principal() -> None:
    a = runqueue.submit(kind="k", principal="alice", idempotency_key="key-1")
    b = runqueue.submit(kind="k", principal="bob", idempotency_key="key-1")
    c = runqueue.submit(kind="k", principal="alice", tenant="t2", idempotency_key="key-1")
    assert len({a.run.id, b.run.id, c.run.id}) == 3


def test_expired_key_is_free_again() -> None:
    first = runqueue.submit(kind="k", idempotency_key="key-1")
    IdempotencyKey.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    again = runqueue.submit(kind="k", payload={"other": True}, idempotency_key="key-1")
    assert again.outcome == "created"
    assert again.run.id != first.run.id


def test_key_retention_follows_settings(settings) -> None:
    settings.RUNQUEUE = {"IDEMPOTENCY_KEY_RETENTION_SECONDS": 3600}
    runqueue.submit(kind="k", idempotency_key="key-1")
    key = IdempotencyKey.objects.get()
    assert dt.timedelta(minutes=59) < key.expires_at - key.created_at < dt.timedelta(minutes=61)


def test_busy_session_is_an_active_run_conflict() -> None:
    first = runqueue.submit(kind="k", session_id="s1")
    with pytest.raises(ActiveRunConflict) as excinfo:
        runqueue.submit(kind="k", session_id="s1", idempotency_key="key-2")
    assert (excinfo.value.run_id, excinfo.value.status) == (first.run.id, RunStatus.QUEUED)
    assert not IdempotencyKey.objects.exists()


def test_running_session_is_an_active_run_conflict() -> None:
    first = runqueue.submit(kind="k", session_id="s1")
    leases.claim_one("w1")
    with pytest.raises(ActiveRunConflict) as excinfo:
        runqueue.submit(kind="k", session_id="s1")
    assert (excinfo.value.run_id, excinfo.value.status) == (first.run.id, RunStatus.RUNNING)


def _waiting_run(session_id: str = "s1") -> Run:
    runqueue.submit(kind="chat.turn", session_id=session_id, payload={"text": "book a flight"})
    lease = leases.claim_one("w1")
    assert leases.wait_for_user(lease, {"ask": "Which day?"}, state={"step": 1})
    return Run.objects.get(id=lease.run_id)


def test_submit_to_a_waiting_session_delivers_input_to_the_same_run() -> None:
    waiting = _waiting_run()
    sub = runqueue.submit(
        kind="chat.turn", session_id="s1", payload={"text": "Tuesday"}, idempotency_key="k-2"
    )
    assert sub.outcome == "input_delivered"
    assert sub.run.id == waiting.id
    run = Run.objects.get(id=waiting.id)
    assert (run.status, run.input, run.attempts) == (RunStatus.QUEUED, {"text": "Tuesday"}, 0)
    assert run.lease_epoch == waiting.lease_epoch + 1
    assert Run.objects.count() == 1
    assert event_types(run.id)[-2:] == ["run.waiting", "run.input_delivered"]

    replay = runqueue.submit(
        kind="chat.turn", session_id="s1", payload={"text": "Tuesday"}, idempotency_key="k-2"
    )
    assert (replay.outcome, replay.original_outcome, replay.run.id) == (
        "replayed",
        "input_delivered",
        waiting.id,
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": ""}, "kind"),
        ({"kind": 5}, "kind"),
        ({"kind": "x" * 256}, "kind"),
        ({"tenant": ""}, "tenant"),
        ({"session_id": ""}, "session_id"),
        ({"session_id": "a\x00b"}, "session_id"),
        ({"priority": -1}, "priority"),
        ({"priority": 40000}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2**31}, "max_attempts"),  # past the integer column
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "has space"}, "idempotency_key"),
        ({"idempotency_key": "k" * 256}, "idempotency_key"),
        ({"idempotency_key": "é"}, "idempotency_key"),
        ({"scheduled_for": dt.datetime(2030, 1, 1)}, "scheduled_for"),  # noqa: DTZ001
        ({"scheduled_for": "tomorrow"}, "scheduled_for"),
        ({"payload": {"x": {1, 2}}}, "payload"),
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"payload": {"x": "nul\x00"}}, "payload"),
    ],
)
def test_bad_input_gets_a_clear_error_and_writes_nothing(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidSubmission) as excinfo:
        runqueue.submit(**({"kind": "k"} | kwargs))
    assert excinfo.value.field == field
    assert str(excinfo.value).startswith(f"{field}: ")
    assert not Run.objects.exists()
    assert not EventLog.objects.exists()
    assert not IdempotencyKey.objects.exists()


def test_unknown_kind_is_refused_and_writes_nothing() -> None:
    with pytest.raises(runqueue.UnknownKind) as excinfo:
        runqueue.submit(kind="no.such.handler")
    assert excinfo.value.kind == "no.such.handler"
    assert str(excinfo.value) == "no handler registered for kind 'no.such.handler'"
    assert not Run.objects.exists()


def test_scheduled_for_with_an_offset_postgresql_refuses_is_stored_in_utc() -> None:
    odd = dt.timezone(-dt.timedelta(hours=17, minutes=19))
    when = dt.datetime(2030, 5, 5, 10, 21, 30, tzinfo=odd)
    sub = runqueue.submit(kind="k", scheduled_for=when)
    assert Run.objects.get(id=sub.run.id).scheduled_for == when


def test_unicode_payload_round_trips() -> None:
    payload = {"text": "héllo 🌍 \u202e", "nested": [1, 2.5, None, True]}
    sub = runqueue.submit(kind="k", payload=payload)
    assert Run.objects.get(id=sub.run.id).payload == payload


def test_priority_class_is_accepted() -> None:
    sub = runqueue.submit(kind="k", priority=PriorityClass.MAINTENANCE)
    assert sub.run.priority == 20


def test_submit_notifies_on_commit(raw_connect) -> None:
    listener = raw_connect()
    listener.execute("LISTEN runqueue")
    runqueue.submit(kind="k", priority=PriorityClass.ASYNC)
    [note] = list(listener.notifies(timeout=5, stop_after=1))
    assert (note.channel, note.payload) == ("runqueue", "async")


# --- concurrency: real threads, real connections --------------------------------

N_THREADS = 20


def _race(n: int, fn) -> list[Worker]:
    barrier = threading.Barrier(n)

    def go(i: int):
        barrier.wait()
        return fn(i)

    workers = [Worker(lambda i=i: go(i), name=f"submitter-{i}") for i in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    return workers


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_to_one_session_make_one_run() -> None:
    workers = _race(
        N_THREADS, lambda i: runqueue.submit(kind="k", session_id="s1", payload={"i": i})
    )
    created = [w.result for w in workers if w.error is None]
    conflicts = [w.error for w in workers if isinstance(w.error, ActiveRunConflict)]
    assert len(created) == 1
    assert len(conflicts) == N_THREADS - 1
    assert {c.run_id for c in conflicts} == {created[0].run.id}
    assert Run.objects.filter(session_id="s1").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_with_one_key_make_one_run() -> None:
    workers = _race(
        N_THREADS,
        lambda i: runqueue.submit(
            kind="k", session_id="s1", payload={"x": 1}, idempotency_key="k1"
        ),
    )
    results = [w.outcome() for w in workers]
    assert len({r.run.id for r in results}) == 1
    assert sorted(r.outcome for r in results) == ["created"] + ["replayed"] * (N_THREADS - 1)
    assert Run.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_with_one_key_and_different_bodies() -> None:
    workers = _race(
        N_THREADS, lambda i: runqueue.submit(kind="k", payload={"i": i}, idempotency_key="k1")
    )
    winners = [w.result for w in workers if w.error is None]
    losers = [w.error for w in workers if w.error is not None]
    assert len(winners) == 1
    assert len(losers) == N_THREADS - 1
    assert all(isinstance(e, IdempotencyConflict) for e in losers), losers
    assert Run.objects.count() == 1
