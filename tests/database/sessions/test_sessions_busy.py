"""A submit to a busy session (``on_busy``, docs/decisions.md "Busy sessions:
on_busy"), in one process: each policy, the line's order and cap, every way
the active run ends queuing the next turn (in the statement that ends it),
cancels and expiries of pending turns, idempotent replays, ``ctx.interrupted``
and merged payloads, retention. Races on real connections:
tests/workers/test_sessions_busy_race.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test import override_settings

import runqueue
from runqueue import leases, runtime, testing
from runqueue.errors import (
    ActiveRunConflict,
    InvalidSubmission,
    SessionQueueFull,
)
from runqueue.history import partitions
from runqueue.leases.failures import permanent_failure
from runqueue.leases.turns import turn_payloads
from runqueue.models import (
    LIVE_STATUSES,
    EventLog,
    IdempotencyKey,
    Run,
    RunStatus,
    ToolInvocation,
)
from runqueue.submission.submit import SubmitRequest, submit_many
from tests.helpers import event_types, expire_lease

pytestmark = pytest.mark.django_db(transaction=True)


def _turn(text: str, *, on_busy: str | None = "enqueue", session: str = "s1", **kw) -> object:
    return runqueue.submit(
        kind="k", session_id=session, payload={"text": text}, on_busy=on_busy, **kw
    )


def _line(session: str = "s1") -> list[tuple[str, str]]:
    """The session's live runs: the active one, then the pending ones in order."""
    runs = Run.objects.filter(session_id=session, status__in=LIVE_STATUSES)
    ordered = sorted(runs, key=lambda r: (r.status == RunStatus.PENDING, r.place or 0))
    return [(r.payload["text"], r.status) for r in ordered]


def _invariants() -> None:
    assert testing.double_actives() == []
    assert testing.unpromoted_sessions() == []
    assert testing.double_promotions() == []


def _claim(session: str = "s1") -> leases.Lease:
    lease = leases.claim_one("w1")
    assert lease is not None
    assert lease.run.session_id == session
    return lease


# --- reject, the default -------------------------------------------------------


def test_reject_is_the_default_and_writes_nothing() -> None:
    first = _turn("hi", on_busy=None)
    with pytest.raises(ActiveRunConflict) as excinfo:
        _turn("again", on_busy=None, idempotency_key="k-2")
    assert excinfo.value.run_id == first.run.id
    with pytest.raises(ActiveRunConflict):
        _turn("again", on_busy="reject")
    assert Run.objects.count() == 1
    assert not IdempotencyKey.objects.exists()


def test_the_default_comes_from_settings(settings) -> None:
    settings.RUNQUEUE = {"SESSION_ON_BUSY": "enqueue"}
    _turn("one", on_busy=None)
    second = _turn("two", on_busy=None)
    assert (second.outcome, second.run.status) == ("enqueued", RunStatus.PENDING)
    with pytest.raises(ActiveRunConflict):
        _turn("three", on_busy="reject")


@pytest.mark.parametrize("value", ["queue", "", 3, ["enqueue"]])
def test_an_unknown_policy_is_refused_before_anything_is_written(value) -> None:
    _turn("hi")
    with pytest.raises(InvalidSubmission) as excinfo:
        _turn("again", on_busy=value)
    assert excinfo.value.field == "on_busy"
    assert "must be one of reject, enqueue, interrupt, rollback, merge" in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)
    assert Run.objects.count() == 1


# --- enqueue -----------------------------------------------------------------


def test_enqueued_turns_wait_in_order_and_each_end_queues_the_next() -> None:
    first = _turn("one")
    second = _turn("two")
    third = _turn("three")
    assert (first.outcome, second.outcome, third.outcome) == ("created", "enqueued", "enqueued")
    assert second.run.status == RunStatus.PENDING
    assert _line() == [
        ("one", RunStatus.QUEUED),
        ("two", RunStatus.PENDING),
        ("three", RunStatus.PENDING),
    ]
    # A pending turn is never claimed: the first claim takes the active run,
    # the next finds nothing.
    lease = _claim()
    assert lease.run_id == first.run.id
    assert leases.claim_one("w2") is None
    assert testing.succeed(lease, {"ok": 1})
    assert _line() == [("two", RunStatus.QUEUED), ("three", RunStatus.PENDING)]
    assert event_types(second.run.id) == ["run.created", "run.promoted"]
    lease = _claim()
    assert lease.run_id == second.run.id
    assert testing.succeed(lease)
    assert _line() == [("three", RunStatus.QUEUED)]
    assert testing.succeed(_claim())
    assert _line() == []
    _invariants()


def test_every_way_the_active_run_ends_queues_the_next_turn() -> None:
    """Success, permanent failure, a give-up on the last attempt, a dead
    letter by the sweeper, a cancel, the worker's batched finish, and a
    start deadline: each queues the next turn in its own statement."""
    # Permanent failure.
    _turn("a1")
    _turn("a2")
    assert testing.fail(_claim(), permanent_failure(ValueError("no"), attempt=1))
    assert _line() == [("a2", RunStatus.QUEUED)]
    testing.succeed(_claim())
    # A transient give-up on the last attempt (dead-lettered).
    _turn("b1", max_attempts=1)
    _turn("b2")
    assert leases.give_up(_claim(), RuntimeError("flaky"))
    assert Run.objects.get(payload__text="b1").status == RunStatus.FAILED
    assert _line() == [("b2", RunStatus.QUEUED)]
    testing.succeed(_claim())
    # The sweeper dead-letters an expired lease on its last attempt.
    _turn("c1", max_attempts=1)
    _turn("c2")
    lease = _claim()
    expire_lease(lease.run_id)
    leases.sweep()
    assert Run.objects.get(payload__text="c1").status == RunStatus.FAILED
    assert _line() == [("c2", RunStatus.QUEUED)]
    testing.succeed(_claim())
    # A cancel (of a running run).
    _turn("d1")
    _turn("d2")
    lease = _claim()
    runqueue.cancel(lease.run_id, reason="stop", actor="staff")
    assert _line() == [("d2", RunStatus.QUEUED)]
    testing.succeed(_claim())
    # The worker's finish-and-claim statement, which may claim the next turn
    # itself only in a later statement (it is queued by this one).
    _turn("e1")
    _turn("e2")
    lease = _claim()
    from runqueue.leases.outcomes import Succeeded

    spec = leases.claim_spec("w1", leases.ALL_CLASSES, limit=1)
    (ok,), claimed = leases.finish_and_claim([(lease, Succeeded.of(None))], spec)
    assert ok and claimed == []
    assert _line() == [("e2", RunStatus.QUEUED)]
    testing.succeed(_claim())
    # A start deadline: the active run expires unclaimed.
    first = _turn("f1", start_within=60)
    _turn("f2")
    _past_start_by(first.run.id)
    assert leases.expire_unstarted() == [first.run.id]
    assert _line() == [("f2", RunStatus.QUEUED)]
    _invariants()


def _past_start_by(*run_ids) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET start_by = now() - interval '1 second' WHERE id = ANY(%s)",
            [list(run_ids)],
        )


def test_a_waiting_active_run_keeps_the_line_until_it_ends() -> None:
    """An active run waiting for a signal keeps its session; a submit is
    enqueued; its cancel moves the line on."""
    first = _turn("one")
    lease = _claim()
    assert leases.suspend(lease, "signal", name="go")
    _turn("two")
    assert _line() == [("one", RunStatus.WAITING), ("two", RunStatus.PENDING)]
    runqueue.cancel(first.run.id, reason="", actor="t")
    assert _line() == [("two", RunStatus.QUEUED)]


def test_a_run_waiting_for_the_user_takes_a_submit_without_a_policy_as_its_input() -> None:
    """An explicit policy is honoured while the run waits (the message is
    not an answer it never meant to be: tests/database/sessions/test_sessions_order.py);
    without one, or with ``answer``, the submit is the answer."""
    for policy in (None, "answer"):
        session = f"s-{policy}"
        first = _turn("book a flight", session=session)
        lease = _claim(session)
        assert leases.wait_for_user(lease, {"ask": "Which day?"}, state={"step": 1})
        answer = _turn("Tuesday", session=session, on_busy=policy)
        assert answer.outcome == "input_delivered"
        assert answer.run.id == first.run.id
        run = Run.objects.get(id=first.run.id)
        assert (run.status, run.input) == (RunStatus.QUEUED, {"text": "Tuesday"})
        assert Run.objects.filter(session_id=session).count() == 1
        testing.succeed(_claim(session))


def test_the_line_has_a_cap(settings) -> None:
    settings.RUNQUEUE = {"SESSION_MAX_PENDING": 2}
    first = _turn("one")
    _turn("two")
    _turn("three")
    with pytest.raises(SessionQueueFull) as excinfo:
        _turn("four", idempotency_key="k-4")
    assert (excinfo.value.run_id, excinfo.value.limit) == (first.run.id, 2)
    assert Run.objects.count() == 3
    assert not IdempotencyKey.objects.exists()
    # The cap is on pending turns: once one is promoted, there is room again.
    testing.succeed(_claim())
    assert _turn("four").outcome == "enqueued"


def test_cancelling_a_pending_turn_ends_it_and_leaves_the_line_in_order() -> None:
    _turn("one")
    two = _turn("two")
    _turn("three")
    run = runqueue.cancel(two.run.id, reason="never mind", actor="user")
    assert run.status == RunStatus.CANCELLED
    assert _line() == [("one", RunStatus.QUEUED), ("three", RunStatus.PENDING)]
    testing.succeed(_claim())
    assert _line() == [("three", RunStatus.QUEUED)]
    _invariants()


def test_a_pending_turn_past_its_start_deadline_expires_where_it_waits() -> None:
    """A turn's start_within counts from its submit: one waiting in line
    past it is cancelled as expired, and the line moves on past it."""
    _turn("one")
    two = _turn("two", start_within=60)
    _turn("three")
    assert two.run.start_by is not None
    _past_start_by(two.run.id)
    assert leases.next_deadline() <= 0
    assert leases.expire_unstarted() == [two.run.id]
    two.run.refresh_from_db()
    assert (two.run.status, two.run.failure["classification"]) == (RunStatus.CANCELLED, "expired")
    testing.succeed(_claim())
    assert _line() == [("three", RunStatus.QUEUED)]


def test_a_promoted_turn_past_its_start_deadline_is_expired_and_the_next_queued() -> None:
    _turn("one")
    two = _turn("two", start_within=60)
    _turn("three")
    lease = _claim()
    _past_start_by(two.run.id)
    # The line moved on before the deadline service looked: the claim skips
    # the stale turn, the service expires it and queues the next.
    assert testing.succeed(lease)
    assert leases.claim_one("w1") is None
    assert leases.expire_unstarted() == [two.run.id]
    assert _line() == [("three", RunStatus.QUEUED)]


def test_a_promoted_turn_is_claimed_as_any_queued_run_by_priority() -> None:
    """Priority applies to a promoted turn: an async turn waits behind an
    interactive run submitted after it."""
    _turn("one")
    _turn("two", priority=runqueue.PriorityClass.ASYNC)
    testing.succeed(_claim())
    other = runqueue.submit(kind="k", payload={"text": "other"})
    assert leases.claim_one("w1").run_id == other.run.id
    assert leases.claim_one("w1").run.payload == {"text": "two"}


# --- idempotency -------------------------------------------------------------


@pytest.mark.parametrize("policy", ["enqueue", "interrupt", "rollback", "merge"])
def test_a_replay_returns_the_first_outcome_and_does_nothing_again(policy) -> None:
    _turn("one")
    lease = _claim()
    first = _turn("two", on_busy=policy, idempotency_key="k-2")
    again = _turn("two", on_busy=policy, idempotency_key="k-2")
    assert (again.outcome, again.original_outcome, again.run.id) == (
        "replayed",
        first.outcome,
        first.run.id,
    )
    # Whatever the retry says on_busy is (not part of the request's hash).
    other = _turn("two", on_busy="reject", idempotency_key="k-2")
    assert (other.outcome, other.run.id) == ("replayed", first.run.id)
    assert Run.objects.filter(session_id="s1").count() == 2
    if policy in ("interrupt", "rollback"):
        assert Run.objects.get(id=lease.run_id).status == RunStatus.CANCELLED
        assert Run.objects.get(id=first.run.id).status == RunStatus.QUEUED
    _invariants()


# --- interrupt and rollback --------------------------------------------------


def test_interrupt_cancels_the_active_run_and_starts_the_new_one_with_what_it_did() -> None:
    first = runqueue.submit(kind="test.tools", session_id="s1", payload={"text": "one"})
    lease = _claim()
    ctx = runtime.build_context(lease)
    assert ctx.interrupted is None
    assert ctx.checkpoint({"step": 1})
    assert ctx.invoke_tool("lookup", lambda: {"found": 3}).value == {"found": 3}
    leases.record_tool_started(
        lease, seq=ctx._seq, tool="charge", idempotency="non_idempotent", arguments={}
    )
    assert ctx.stream("Looking that up") and ctx.text.flush()
    pending = _turn("later")
    sub = runqueue.submit(
        kind="k", session_id="s1", payload={"text": "stop, do this"}, on_busy="interrupt"
    )
    assert sub.outcome == "interrupted"
    assert (sub.run.status, sub.run.interrupted_id) == (RunStatus.QUEUED, first.run.id)
    old = Run.objects.get(id=first.run.id)
    assert old.status == RunStatus.CANCELLED
    (cancelled,) = EventLog.objects.filter(run_id=old.id, type="run.cancelled").values_list(
        "data", flat=True
    )
    assert (cancelled["reason"], cancelled["by"]) == ("interrupted", str(sub.run.id))
    # The old worker is fenced; its call in flight is uncertain.
    assert not leases.heartbeat(lease)
    charge = ToolInvocation.objects.get(run_id=old.id, tool="charge")
    assert charge.status == "uncertain"
    # The new run is the session's active run, ahead of the turn in line.
    assert _line() == [("stop, do this", RunStatus.QUEUED), ("later", RunStatus.PENDING)]
    new = _claim()
    assert new.run_id == sub.run.id
    ctx = runtime.build_context(new)
    got = ctx.interrupted
    assert got.run_id == first.run.id
    assert got.payload == {"text": "one"}
    assert got.state == {"step": 1}
    assert [(t.tool, t.status, t.result) for t in got.tools] == [
        ("lookup", "completed", {"found": 3}),
        ("charge", "uncertain", None),
    ]
    assert got.text == "Looking that up"
    assert runtime.AsyncRunContext(ctx).interrupted is got
    testing.succeed(new)
    assert _line() == [("later", RunStatus.QUEUED)]
    assert pending.run.id == Run.objects.get(status=RunStatus.QUEUED).id
    _invariants()


def test_rollback_cancels_the_active_run_and_carries_nothing() -> None:
    first = _turn("one")
    lease = _claim()
    sub = _turn("instead", on_busy="rollback")
    assert sub.outcome == "rolled_back"
    assert sub.run.interrupted_id is None
    old = Run.objects.get(id=first.run.id)
    assert old.status == RunStatus.CANCELLED
    assert EventLog.objects.get(run_id=old.id, type="run.cancelled").data["reason"] == (
        "rolled_back"
    )
    new = _claim()
    assert runtime.build_context(new).interrupted is None
    assert not leases.heartbeat(lease)


def test_interrupt_of_a_run_not_claimed_yet() -> None:
    first = _turn("one")
    sub = _turn("two", on_busy="interrupt")
    assert Run.objects.get(id=first.run.id).status == RunStatus.CANCELLED
    lease = _claim()
    assert lease.run_id == sub.run.id
    got = runtime.build_context(lease).interrupted
    assert (got.run_id, got.state, got.tools, got.text) == (first.run.id, None, (), "")


# --- merge -------------------------------------------------------------------


def test_merge_joins_a_turn_not_claimed_yet() -> None:
    first = _turn("hi")
    sub = _turn("are you there?", on_busy="merge")
    assert (sub.outcome, sub.run.id) == ("merged", first.run.id)
    run = Run.objects.get(id=first.run.id)
    # The queue records the merge beside the payload, which stays the first message's.
    assert run.payload == {"text": "hi"}
    assert run.turn == {"payloads": [{"text": "hi"}, {"text": "are you there?"}]}
    _turn("hello??", on_busy="merge")
    run.refresh_from_db()
    assert turn_payloads(run) == [
        {"text": "hi"},
        {"text": "are you there?"},
        {"text": "hello??"},
    ]
    assert Run.objects.count() == 1
    lease = _claim()
    assert runtime.build_context(lease).payloads == turn_payloads(run)
    assert event_types(run.id)[:3] == ["run.created", "run.merged", "run.merged"]


def test_merge_into_a_claimed_run_lines_up_and_joins_the_last_pending_turn() -> None:
    _turn("one")
    lease = _claim()
    second = _turn("two", on_busy="merge")
    assert (second.outcome, second.run.status) == ("enqueued", RunStatus.PENDING)
    third = _turn("three", on_busy="merge")
    assert (third.outcome, third.run.id) == ("merged", second.run.id)
    assert turn_payloads(Run.objects.get(id=second.run.id)) == [{"text": "two"}, {"text": "three"}]
    testing.succeed(lease)
    assert runtime.build_context(_claim()).payloads == [{"text": "two"}, {"text": "three"}]


def test_merge_never_joins_another_kind() -> None:
    _turn("one")
    other = runqueue.submit(kind="test.echo", session_id="s1", payload={}, on_busy="merge")
    assert other.outcome == "enqueued"


def test_payloads_of_a_run_not_merged_is_its_payload() -> None:
    """Whatever the payload's shape: a client's ``{"merged": [...]}`` is its
    own payload, never read as a merge (only the queue's record says so)."""
    shaped = runqueue.submit(kind="k", session_id="s1", payload={"merged": [{"a": 1}, {"b": 2}]})
    run = Run.objects.get(id=shaped.run.id)
    assert turn_payloads(run) == [{"merged": [{"a": 1}, {"b": 2}]}]
    assert runtime.build_context(_claim()).payloads == [{"merged": [{"a": 1}, {"b": 2}]}]
    _turn("next")  # a busy session: lines up behind it
    joined = _turn("and", on_busy="merge")
    assert turn_payloads(Run.objects.get(id=joined.run.id)) == [{"text": "next"}, {"text": "and"}]


# --- submit_many, retention, settings ----------------------------------------


def test_submit_many_routes_each_request_with_its_policy() -> None:
    out = submit_many(
        [
            SubmitRequest(kind="k", session_id="m", payload={"text": "a"}),
            SubmitRequest(kind="k", session_id="m", payload={"text": "b"}, on_busy="enqueue"),
            SubmitRequest(kind="k", session_id="m", payload={"text": "c"}, on_busy="merge"),
        ]
    )
    assert [s.outcome for s in out] == ["created", "enqueued", "merged"]
    assert out[2].run.id == out[1].run.id
    pending = Run.objects.get(session_id="m", status=RunStatus.PENDING)
    assert turn_payloads(pending) == [{"text": "b"}, {"text": "c"}]
    with pytest.raises(InvalidSubmission) as excinfo:
        submit_many([SubmitRequest(kind="k", session_id="m", on_busy="later")])
    assert excinfo.value.index == 0


def test_retention_never_drops_a_pending_turn() -> None:
    _turn("one")
    two = _turn("two")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET created_at = now() - interval '30 days' WHERE id = %s",
            [two.run.id],
        )
    partitions.ensure()
    partitions.prune(older_than_seconds=1)
    assert Run.objects.get(id=two.run.id).status == RunStatus.PENDING
    assert event_types(two.run.id) == ["run.created"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"SESSION_ON_BUSY": "later"}, "SESSION_ON_BUSY"),
        ({"SESSION_MAX_PENDING": 0}, "SESSION_MAX_PENDING"),
        ({"SESSION_MAX_PENDING": 1.5}, "SESSION_MAX_PENDING"),
    ],
)
def test_bad_settings_are_refused(raw, message) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from runqueue.conf import parse

    with pytest.raises(ImproperlyConfigured, match=message):
        parse(raw)
    assert parse({"SESSION_MAX_PENDING": None}).SESSION_MAX_PENDING is None


@override_settings(RUNQUEUE={"SESSION_MAX_PENDING": None})
def test_no_cap_when_none() -> None:
    _turn("one")
    for n in range(12):
        _turn(f"t{n}")
    assert Run.objects.filter(status=RunStatus.PENDING).count() == 12


def test_scheduled_pending_turn_keeps_its_time() -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    _turn("one")
    two = _turn("two", scheduled_for=later)
    testing.succeed(_claim())
    run = Run.objects.get(id=two.run.id)
    assert run.status == RunStatus.QUEUED
    assert run.scheduled_for >= later - dt.timedelta(seconds=1)
    assert leases.claim_one("w1") is None
