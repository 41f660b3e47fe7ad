"""A session's messages reach its agent once and in the order sent, whatever
the agent is doing (docs/decisions.md, "Busy sessions: on_busy"): what it
writes while the agent asks, a chain of interrupts, steering a running turn
(``on_busy="steer"``, ``ctx.steers()``), and a run that can never start."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import F

import runqueue
from runqueue import leases, runtime, testing
from runqueue.errors import ActiveRunConflict
from runqueue.leases.turns import turn_payloads
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation
from tests.database.sessions.test_sessions_busy import _claim, _invariants, _line, _turn
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db(transaction=True)


def _ask(lease: leases.Lease) -> str:
    """The running turn asks the user (``ctx.ask_user``) and its outcome is written."""
    ctx = runtime.build_context(lease)
    outcome = runtime._returned(lease, ctx, ctx.ask_user("?"))
    return leases.label(lease, outcome, leases.write(lease, outcome))


def _cancel_data(run_id) -> dict:
    return EventLog.objects.get(run_id=run_id, type="run.cancelled").data


# --- item 1 and 5: what the user writes while the agent asks ----------------------


def test_a_message_waiting_in_line_is_the_answer_when_the_turn_asks() -> None:
    """Turn A runs; "earlier" lines up; A asks the user: "earlier" is its
    answer at once, and "later" (sent after) is never delivered before it."""
    first = _turn("A")
    lease = _claim()
    earlier = _turn("earlier")
    assert earlier.outcome == "enqueued"
    assert _ask(lease) == "waiting"
    resumed = Run.objects.get(id=first.run.id)
    assert (resumed.status, resumed.input) == (RunStatus.QUEUED, {"text": "earlier"})
    answered = _cancel_data(earlier.run.id)
    assert (answered["reason"], answered["to"]) == ("answered", str(first.run.id))
    later = _turn("later")  # the session is busy again: it lines up
    assert later.outcome == "enqueued"
    assert _line() == [("A", RunStatus.QUEUED), ("later", RunStatus.PENDING)]
    _invariants()


def test_a_merged_message_in_line_answers_with_its_first_and_keeps_the_rest() -> None:
    first = _turn("A")
    lease = _claim()
    _turn("one")
    joined = _turn("two", on_busy="merge")
    assert joined.outcome == "merged"
    _ask(lease)
    assert Run.objects.get(id=first.run.id).input == {"text": "one"}
    rest = Run.objects.get(id=joined.run.id)
    assert rest.status == RunStatus.PENDING
    assert turn_payloads(rest) == [{"text": "two"}]
    assert "run.answered" in [e.type for e in EventLog.objects.filter(run_id=rest.id)]


@pytest.mark.parametrize("policy", ["enqueue", "interrupt", "rollback", "steer", "reject"])
def test_an_explicit_policy_is_honoured_while_the_agent_waits_for_the_user(policy) -> None:
    """Only a submit that is an answer (no policy, or ``answer``) becomes the
    input of a run waiting for the user."""
    first = _turn("A")
    _ask(_claim())
    assert Run.objects.get(id=first.run.id).status == RunStatus.WAITING_FOR_USER
    if policy == "reject":
        with pytest.raises(ActiveRunConflict):
            _turn("not an answer", on_busy=policy)
        return
    sub = _turn("not an answer", on_busy=policy)
    assert sub.outcome != "input_delivered"
    assert Run.objects.get(id=first.run.id).input is None
    _invariants()


@pytest.mark.parametrize("policy", [None, "answer"])
def test_a_message_without_a_policy_or_marked_answer_is_the_answer(policy) -> None:
    first = _turn("A")
    _ask(_claim())
    sub = _turn("yes", on_busy=policy)
    assert (sub.outcome, sub.run.id) == ("input_delivered", first.run.id)
    assert Run.objects.get(id=first.run.id).input == {"text": "yes"}


def test_answer_to_a_busy_turn_lines_up() -> None:
    _turn("A")
    _claim()
    assert _turn("meant as an answer", on_busy="answer").outcome == "enqueued"


# --- item 2: a chain of interrupts ---------------------------------------------------


def test_interrupting_a_turn_that_never_started_keeps_the_turn_before_it() -> None:
    """Turn 1 ("Oslo?") finishes a search; turn 2 ("May") interrupts it;
    turn 3 ("Tuesdays") interrupts turn 2 before any worker took it: turn 3
    sees both earlier messages and turn 1's search."""
    first = _turn("Oslo?")
    lease = _claim()
    ctx = runtime.build_context(lease)
    ctx.invoke_tool("search", lambda q: {"flights": 3}, args={"q": "Oslo"})
    second = _turn("May", on_busy="interrupt")
    third = _turn("Tuesdays", on_busy="interrupt")
    assert Run.objects.get(id=second.run.id).status == RunStatus.CANCELLED
    got = runtime.build_context(_claim()).interrupted
    assert got.run_id == second.run.id and got.payloads == ({"text": "May"},)
    assert got.earlier is not None and got.earlier.run_id == first.run.id
    assert [t.tool for t in got.earlier.tools] == ["search"]
    assert [i.payload for i in got.chain()] == [{"text": "Oslo?"}, {"text": "May"}]
    assert third.run.interrupted_id == second.run.id


# --- item 4: a run that can never start --------------------------------------------


def test_a_submit_that_meets_an_expired_active_run_expires_it_and_takes_the_session() -> None:
    stale = _turn("stale", start_within=60)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET start_by = now() - interval '1 second' WHERE id = %s",
            [stale.run.id],
        )
    fresh = _turn("fresh", on_busy=None)  # would be refused if the stale run held the session
    assert fresh.outcome == "created"
    gone = Run.objects.get(id=stale.run.id)
    assert gone.status == RunStatus.CANCELLED
    assert _cancel_data(stale.run.id)["reason"] == "expired"
    _invariants()


def test_an_expired_active_run_hands_the_session_to_its_line_first() -> None:
    stale = _turn("stale", start_within=60)
    waiting = _turn("in line")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET start_by = now() - interval '1 second' WHERE id = %s",
            [stale.run.id],
        )
    later = _turn("later")
    assert later.outcome == "enqueued"
    assert _line() == [("in line", RunStatus.QUEUED), ("later", RunStatus.PENDING)]
    assert Run.objects.get(id=waiting.run.id).status == RunStatus.QUEUED
    _invariants()


# --- item 6: steering a running turn --------------------------------------------------


def test_a_steer_reaches_the_running_turn_once_and_replays_after_a_crash() -> None:
    first = _turn("plan a trip")
    lease = _claim()
    ctx = runtime.build_context(lease)
    assert ctx.steers() == []  # none yet: no step taken
    assert ctx._seq == 0
    s1 = _turn("make it May", on_busy="steer")
    s2 = _turn("and cheap", on_busy="steer")
    assert (s1.outcome, s2.outcome) == ("steered", "steered")
    assert ctx.steers() == [{"text": "make it May"}, {"text": "and cheap"}]
    assert ctx.steers() == []
    assert _cancel_data(s1.run.id)["reason"] == "steered"
    assert _cancel_data(s2.run.id)["into"] == str(first.run.id)
    step = ToolInvocation.objects.get(run_id=first.run.id, seq=0)
    assert step.tool == leases.STEERS_TOOL
    # The worker dies; the retry replays the same messages at the same point.
    expire_lease(first.run.id)
    leases.sweep()
    Run.objects.filter(id=first.run.id).update(scheduled_for=None)
    again = runtime.build_context(_claim())
    late = _turn("one more", on_busy="steer")
    assert again.steers() == [{"text": "make it May"}, {"text": "and cheap"}]
    assert again.steers() == [{"text": "one more"}]  # past the record: read live
    assert _cancel_data(late.run.id)["reason"] == "steered"
    _invariants()


def test_a_steer_the_turn_never_read_runs_as_the_next_turn() -> None:
    _turn("plan a trip")
    lease = _claim()
    never_read = _turn("make it May", on_busy="steer")
    testing.succeed(lease)
    promoted = Run.objects.get(id=never_read.run.id)
    assert promoted.status == RunStatus.QUEUED  # never lost: the session's next turn
    ctx = runtime.build_context(_claim())
    assert ctx.payloads == [{"text": "make it May"}]
    assert ctx.steers() == []  # it is not its own steer
    _invariants()


def test_a_fenced_turn_takes_no_steer() -> None:
    _turn("plan a trip")
    lease = _claim()
    ctx = runtime.build_context(lease)
    steer = _turn("make it May", on_busy="steer")
    # Another worker took the run over (its lease expired and was claimed again).
    Run.objects.filter(id=lease.run_id).update(lease_epoch=F("lease_epoch") + 1)
    with pytest.raises(runqueue.RunCancelled):
        ctx.steers()
    assert Run.objects.get(id=steer.run.id).status == RunStatus.PENDING


# --- item 7: debounce and latest ----------------------------------------------------------


@runqueue.handler("chat.debounced", debounce=2.0, debounce_max=5.0)
def _debounced(ctx):
    return ctx.payloads


def _due_in(run_id) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM scheduled_for - now()) FROM runqueue_run WHERE id = %s",
            [run_id],
        )
        return float(cursor.fetchone()[0])


def test_debounced_messages_join_one_turn_in_order_and_push_its_start() -> None:
    chat = {"kind": "chat.debounced", "session_id": "typing", "on_busy": "debounce"}
    first = runqueue.submit(**chat, payload={"text": "hi"})
    assert first.outcome == "created"
    assert 1.5 < _due_in(first.run.id) <= 2.0  # an idle session: the turn waits a window
    assert leases.claim_one("w") is None  # not due yet
    second = runqueue.submit(**chat, payload={"text": "I need"})
    third = runqueue.submit(**chat, payload={"text": "a refund"})
    assert (second.outcome, third.outcome) == ("merged", "merged")
    assert second.run.id == third.run.id == first.run.id
    run = Run.objects.get(id=first.run.id)
    assert turn_payloads(run) == [{"text": "hi"}, {"text": "I need"}, {"text": "a refund"}]
    assert 1.5 < _due_in(run.id) <= 2.0
    # A chatty user still gets an answer: never past the longest wait (5 s).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET turn = jsonb_set(turn, '{debounce_until}',"
            " to_jsonb(to_char((now() + interval '1 second') AT TIME ZONE 'UTC',"
            ' \'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"\'))) WHERE id = %s',
            [run.id],
        )
    runqueue.submit(**chat, payload={"text": "please"})
    assert _due_in(run.id) <= 1.0
    Run.objects.filter(id=run.id).update(scheduled_for=None)
    lease = leases.claim_one("w")
    assert lease.run_id == run.id
    assert testing.execute(lease) == "succeeded"
    assert Run.objects.get(id=run.id).result == [
        {"text": "hi"},
        {"text": "I need"},
        {"text": "a refund"},
        {"text": "please"},
    ]


def test_debounce_needs_a_window() -> None:
    with pytest.raises(runqueue.InvalidSubmission, match="debounce"):
        runqueue.submit(kind="k", session_id="s1", payload={}, on_busy="debounce")


def test_latest_replaces_the_turn_not_started_and_keeps_the_replaced_in_the_log() -> None:
    _turn("A")
    _claim()
    pending = _turn("draft one")
    replaced = _turn("draft two", on_busy="latest")
    assert (replaced.outcome, replaced.run.id) == ("merged", pending.run.id)
    run = Run.objects.get(id=pending.run.id)
    assert (run.payload, turn_payloads(run)) == ({"text": "draft two"}, [{"text": "draft two"}])
    (event,) = EventLog.objects.filter(run_id=run.id, type="run.superseded")
    assert event.data["replaced"] == [{"text": "draft one"}]
