"""``runqueue.submit_many``: a fan-out in one statement per chunk, with
``submit``'s rules per request, all or nothing, workers woken once."""

from __future__ import annotations

import importlib
import threading

import pytest
from django.db import connection

import runqueue
from runqueue import PriorityClass, SubmitRequest, db
from runqueue.models import EventLog, IdempotencyKey, Run, RunStatus
from tests.helpers import event_types

R = SubmitRequest


@pytest.mark.django_db
def test_one_submission_per_request_in_order() -> None:
    subs = runqueue.submit_many(
        [R(kind="k", payload={"i": i}, priority=10 + i % 3, tenant="t") for i in range(5)]
    )
    assert [s.outcome for s in subs] == ["created"] * 5
    assert [s.run.payload for s in subs] == [{"i": i} for i in range(5)]
    for sub in subs:
        run = Run.objects.get(id=sub.run.id)
        assert (run.status, run.tenant, run.priority, run.lease_epoch, run.attempts) == (
            RunStatus.QUEUED,
            "t",
            sub.run.priority,
            0,
            0,
        )
        assert run.max_attempts == 3 and run.created_at is not None
        assert event_types(run.id) == ["run.created"]
    assert runqueue.submit_many([]) == []


@pytest.mark.django_db
def test_keys_replay_or_conflict_per_request_and_sessions_deliver() -> None:
    first = runqueue.submit(kind="k", payload={"a": 1}, idempotency_key="key-1").run
    subs = runqueue.submit_many(
        [
            R(kind="k", payload={"a": 1}, idempotency_key="key-1"),  # a retry: replayed
            R(kind="k", payload={"b": 2}, idempotency_key="key-2"),
            R(kind="k", payload={"b": 2}, idempotency_key="key-2"),  # the same call's retry
            R(kind="k", session_id="s1"),
        ]
    )
    assert [s.outcome for s in subs] == ["replayed", "created", "replayed", "created"]
    assert subs[0].run.id == first.id
    assert subs[1].run.id == subs[2].run.id
    assert IdempotencyKey.objects.get(key="key-2").run_id == subs[1].run.id


@pytest.mark.django_db
def test_a_bad_request_is_reported_by_its_index_and_nothing_is_written() -> None:
    before = Run.objects.count()
    with pytest.raises(runqueue.InvalidSubmission) as bad:
        runqueue.submit_many([R(kind="k"), R(kind="k", priority=-1), R(kind="k")])
    assert (bad.value.index, bad.value.field) == (1, "priority")
    with pytest.raises(runqueue.UnknownKind) as unknown:
        runqueue.submit_many([R(kind="k"), R(kind="nobody.handles.this")])
    assert unknown.value.index == 1
    with pytest.raises(runqueue.InvalidSubmission) as not_a_request:
        runqueue.submit_many([R(kind="k"), {"kind": "k"}])  # type: ignore[list-item]
    assert not_a_request.value.index == 1
    assert Run.objects.count() == before


@pytest.mark.django_db
def test_requests_alike_but_their_payload_are_checked_as_one_by_one() -> None:
    """submit_many checks the members a request shares with an earlier one
    once (runqueue.submission.rules.BatchChecks): the payload of each is
    still checked and stored as its own, a value equal to an earlier one
    but of another type (True == 1) is checked again, and an unhashable
    member is checked alone."""
    before = Run.objects.count()
    for requests, index, field in (
        ([R(kind="k", payload={"a": 1}), R(kind="k", payload={"a": "\x00"})], 1, "payload"),
        ([R(kind="k", priority=1), R(kind="k", priority=True)], 1, "priority"),
        ([R(kind="k", max_attempts=2), R(kind="k", max_attempts=2.0)], 1, "max_attempts"),
        ([R(kind="k"), R(kind="k", budget=["b", 1])], 1, "budget"),
    ):
        with pytest.raises(runqueue.InvalidSubmission) as bad:
            runqueue.submit_many(requests)
        assert (bad.value.index, bad.value.field) == (index, field)
    assert Run.objects.count() == before
    subs = runqueue.submit_many(
        [R(kind="k", payload={"n": n, "t": (1, 2)}, tenant="t1") for n in range(3)]
    )
    stored = {r.id: r for r in Run.objects.filter(id__in=[s.run.id for s in subs])}
    assert [stored[s.run.id].payload for s in subs] == [{"n": n, "t": [1, 2]} for n in range(3)]
    assert [s.run.payload for s in subs] == [{"n": n, "t": [1, 2]} for n in range(3)]
    assert {stored[s.run.id].tenant for s in subs} == {"t1"}


@pytest.mark.django_db
def test_a_conflict_rolls_back_the_whole_call() -> None:
    runqueue.submit(kind="k", payload={"a": 1}, idempotency_key="taken")
    before = (Run.objects.count(), EventLog.objects.count(), IdempotencyKey.objects.count())
    with pytest.raises(runqueue.IdempotencyConflict) as conflict:
        runqueue.submit_many(
            [
                R(kind="k", payload={"x": 1}, idempotency_key="fresh"),
                R(kind="k", payload={"other": 1}, idempotency_key="taken"),
            ]
        )
    assert conflict.value.index == 1
    with pytest.raises(runqueue.ActiveRunConflict) as busy:
        runqueue.submit_many([R(kind="k", session_id="s"), R(kind="k", session_id="s")])
    assert busy.value.index == 1
    after = (Run.objects.count(), EventLog.objects.count(), IdempotencyKey.objects.count())
    assert after == before


@pytest.mark.django_db
def test_chunks_are_written_a_statement_each_and_a_taken_key_is_routed(monkeypatch) -> None:
    module = importlib.import_module("runqueue.submission.submit")  # the module, not the function
    monkeypatch.setattr(module, "SUBMIT_MANY_CHUNK", 3)
    requests = [R(kind="k", payload={"i": i}, idempotency_key=f"c{i}") for i in range(7)]
    # Request 5 (in the second chunk) retries request 1 (in the first).
    requests[5] = R(kind="k", payload={"i": 1}, idempotency_key="c1")
    subs = runqueue.submit_many(requests)
    assert [s.outcome for s in subs] == ["created"] * 5 + ["replayed", "created"]
    assert subs[5].run.id == subs[1].run.id
    assert [s.run.payload for s in subs] == [r.payload for r in requests]
    assert Run.objects.count() == 6


@pytest.mark.django_db(transaction=True)
def test_idle_workers_are_woken_once_per_class_on_commit() -> None:
    with db.connect() as listener:
        listener.execute("LISTEN runqueue")
        runqueue.submit_many(
            [R(kind="k", priority=p) for p in (0, 1, 10, 12, 15)]
            + [R(kind="k", priority=20, scheduled_for=_later())]
        )
        got = [n.payload for n in listener.notifies(timeout=1.0, stop_after=10)]
    assert sorted(got) == ["async", "interactive"]


def _later():
    import datetime as dt

    return dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)


@pytest.mark.django_db(transaction=True)
def test_racing_calls_with_the_same_keys_make_one_run_per_key() -> None:
    barrier = threading.Barrier(4)
    results: list[list] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            barrier.wait(10)
            subs = runqueue.submit_many(
                [R(kind="k", payload={"i": i}, idempotency_key=f"race-{i}") for i in range(20)]
            )
            results.append([s.run.id for s in subs])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert Run.objects.filter(payload__has_key="i").count() == 20
    assert Run.objects.filter(id__in=results[0], priority=PriorityClass.INTERACTIVE).count() == 20


@pytest.mark.django_db
def test_the_returned_run_is_the_row_as_stored() -> None:
    """submit builds the Run from what it sent (and created_at): every column
    must match the row, so a column added later cannot drift unnoticed."""
    when = _later()
    subs = [
        runqueue.submit(kind="k", payload={"a": [1, "x"]}, tenant="t", principal="p"),
        runqueue.submit(kind="k", session_id="s-1", idempotency_key="key-x", priority=12),
        *runqueue.submit_many([R(kind="k", scheduled_for=when, max_attempts=5)]),
    ]
    for sub in subs:
        stored = Run.objects.get(id=sub.run.id)
        for field in Run._meta.concrete_fields:
            name = field.attname
            assert getattr(sub.run, name) == getattr(stored, name), name


def _pipeline_chunk(monkeypatch, size: int) -> None:
    module = importlib.import_module("runqueue.submission.submit")  # the module, not the function
    monkeypatch.setattr(module, "PIPELINE_CHUNK", size)


@pytest.mark.django_db
def test_a_fan_out_is_written_chunk_by_chunk_each_run_as_stored(monkeypatch) -> None:
    """A call without keys or sessions is pipelined: its chunks are sent one
    after another before any result is read; the runs come back in order,
    each the row as stored (server values included), the rows beside them
    written in the same call."""
    from decimal import Decimal

    from runqueue.models import TreeSpend

    _pipeline_chunk(monkeypatch, 3)
    when = _later()
    requests = [
        R(
            kind="k",
            payload={"i": i},
            priority=(0, 10, 20)[i % 3],
            scheduled_for=when if i % 4 == 0 else None,
            start_within=60 if i % 5 == 0 else None,
            spend_cap=Decimal("1.50") if i == 7 else None,
        )
        for i in range(11)
    ]
    subs = runqueue.submit_many(requests)
    assert [s.run.payload for s in subs] == [{"i": i} for i in range(11)]
    assert len({s.run.id for s in subs}) == 11
    for sub in subs:
        stored = Run.objects.get(id=sub.run.id)
        for field in Run._meta.concrete_fields:
            name = field.attname
            assert getattr(sub.run, name) == getattr(stored, name), name
        assert event_types(sub.run.id) == ["run.created"]
    assert list(TreeSpend.objects.values_list("run_id", "spend_cap")) == [
        (subs[7].run.id, Decimal("1.50"))
    ]


@pytest.mark.django_db
def test_a_bad_request_in_a_later_chunk_writes_nothing_of_the_call(monkeypatch) -> None:
    """The chunks before it were sent already: the call's transaction takes
    them back."""
    _pipeline_chunk(monkeypatch, 2)
    before = (Run.objects.count(), EventLog.objects.count())
    requests = [R(kind="k", payload={"i": i}) for i in range(7)]
    requests[5] = R(kind="k", payload={"i": 5}, max_attempts=0)
    with pytest.raises(runqueue.InvalidSubmission) as bad:
        runqueue.submit_many(requests)
    assert (bad.value.index, bad.value.field) == (5, "max_attempts")
    assert (Run.objects.count(), EventLog.objects.count()) == before


@pytest.mark.django_db(transaction=True)
def test_a_database_error_in_a_pipelined_chunk_rolls_back_the_call(monkeypatch) -> None:
    """A statement the server refuses (here a trigger's) raises Django's
    error for it, nothing of the call stays, and the connection serves the
    next call."""
    from django.db import DatabaseError

    _pipeline_chunk(monkeypatch, 2)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF NEW.payload ? 'boom' THEN RAISE EXCEPTION 'refused'; END IF;"
            " RETURN NEW; END $$;"
            " CREATE TRIGGER test_refuse_boom BEFORE INSERT ON runqueue_run"
            " FOR EACH ROW EXECUTE FUNCTION test_refuse_boom()"
        )
    try:
        requests = [R(kind="k", payload={"i": i}) for i in range(7)]
        requests[4] = R(kind="k", payload={"boom": 1})
        with pytest.raises(DatabaseError, match="refused"):
            runqueue.submit_many(requests)
        assert Run.objects.count() == 0
        subs = runqueue.submit_many([R(kind="k", payload={"i": i}) for i in range(5)])
        assert Run.objects.filter(id__in=[s.run.id for s in subs]).count() == 5
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER test_refuse_boom ON runqueue_run; DROP FUNCTION test_refuse_boom()"
            )
