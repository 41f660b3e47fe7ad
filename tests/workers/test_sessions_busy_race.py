"""A session's line under concurrency, on real connections (docs/decisions.md,
"Busy sessions: on_busy"): a turn added while the active run ends is queued
exactly once, whichever commits first; two transactions ending runs of one
session (a cancel and a finish, a cancel of a pending turn and the active
run's end) queue one turn, never two and never none; many double texts
racing a worker leave every turn run once, in order. And the rule that
makes it hold: every statement and function of runqueue/sql/ that ends a
run calls runqueue_promote (and runqueue_join)."""

from __future__ import annotations

import re
import threading

import pytest
from django.db import transaction

import runqueue
from runqueue import leases, testing
from runqueue.errors import InvalidTransition
from runqueue.leases.turns import turn_payloads
from runqueue.models import TERMINAL_STATUSES, EventLog, Run, RunStatus
from runqueue.sql import functions, queries
from runqueue.submission.submit import submit_in_transaction
from tests.helpers import Worker, is_blocked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _invariants() -> None:
    assert testing.double_actives() == []
    assert testing.unpromoted_sessions() == []
    assert testing.double_promotions() == []


def _status(run_id) -> str:
    return Run.objects.values_list("status", flat=True).get(id=run_id)


def _held(fn, name: str) -> tuple[Worker, threading.Event, threading.Event]:
    """``fn()`` run in a transaction on a connection of its own, held open
    (uncommitted) until the returned ``release`` is set; ``done_fn`` is set
    once ``fn`` returned inside it."""
    done_fn, release = threading.Event(), threading.Event()

    def body():
        with transaction.atomic():
            result = fn()
            done_fn.set()
            assert release.wait(30)
        return result

    worker = Worker(body, name=name)
    worker.start()
    return worker, done_fn, release


# --- every terminal statement promotes and joins -------------------------------

#: A status assigned in a SET list (a line of its own, as every UPDATE of
#: runqueue/sql/ writes it): the expression after it.
_STATUS_SET = re.compile(r"^\s*(?:SET\s+)?status = (?P<value>.+?),?$", re.MULTILINE)
_LITERAL = re.compile(r"'([a-z_]+)'")


def _ends_runs(text: str) -> bool:
    """Whether the text can set a run's status to a terminal one: it
    assigns a terminal status, or a status it does not spell out (the
    finish's, taken from its input)."""
    for match in _STATUS_SET.finditer(text):
        value = match.group("value")
        literals = set(_LITERAL.findall(value))
        if literals & set(TERMINAL_STATUSES) or not literals:
            return True
    return False


def test_every_statement_that_ends_a_run_calls_runqueue_promote_and_runqueue_join() -> None:
    """A new statement or function that ends runs must queue their
    sessions' next turns and count in their parents: it is listed here on
    purpose. cancel_children joins nothing: its runs' parents are the level
    above, ended by then (cancelled in its transaction or finished before),
    and a wait always counts its children from their statuses."""
    texts = {**queries(), **functions()}
    terminal = {name for name, text in texts.items() if _ends_runs(text)}
    assert terminal == {
        "finish_and_claim",
        "finish_and_claim_capped",
        "fence_finish",
        "fence_give_up",
        "sweep_expired",
        "cancel",
        "cancel_children",
        "expire_unstarted",
        "expire_active_turn",
    }
    for name in sorted(terminal):
        assert "runqueue_promote(" in texts[name], name
        if name != "cancel_children":
            assert "runqueue_join(" in texts[name], name


def test_the_reading_of_a_status_set_sees_each_kind_of_end() -> None:
    """What ``_ends_runs`` counts as an end: a terminal literal, a CASE
    with one, or a status taken from elsewhere; not a live status."""
    assert _ends_runs("UPDATE runqueue_run\nSET status = 'cancelled',\nx = 1")
    assert _ends_runs("SET status = CASE WHEN a THEN 'failed' ELSE 'queued' END,")
    assert _ends_runs("SET status = i.status,")
    assert not _ends_runs("SET x = 1,\nstatus = 'queued',\ny = 2")
    assert not _ends_runs("WHERE id = 1\nAND status = 'failed'")


# --- a turn added while the active run ends ---------------------------------------


def test_a_turn_added_before_the_end_commits_is_queued_by_the_end() -> None:
    """The enqueue holds the active run's lock; the finish waits for it and
    then, in its own statement, queues the turn it committed."""
    active = runqueue.submit(kind="k", session_id="s1").run
    lease = leases.claim_one("w1")
    adder, added, release = _held(
        lambda: submit_in_transaction(kind="k", session_id="s1", on_busy="enqueue"), "adder"
    )
    assert added.wait(30)
    finisher = Worker(lambda: testing.succeed(lease), name="finisher")
    finisher.start()
    assert finisher.started_fn.wait(30)
    wait_until(lambda: is_blocked(finisher.backend_pid), what="the finish to wait for the lock")
    release.set()
    pending = adder.outcome().run
    assert finisher.outcome() is True
    assert _status(active.id) == RunStatus.SUCCEEDED
    assert _status(pending.id) == RunStatus.QUEUED
    _invariants()


def test_a_turn_added_while_the_end_is_uncommitted_lines_up_behind_the_promoted_run() -> None:
    """The end (a cancel, held open) queued the first pending turn; a submit
    meanwhile waits for it, then lines up behind the turn it queued."""
    active = runqueue.submit(kind="k", session_id="s1").run
    first = runqueue.submit(kind="k", session_id="s1", on_busy="enqueue").run
    ender, ended, release = _held(
        lambda: leases.cancel_in_transaction(active.id, reason="", actor="t"), "ender"
    )
    assert ended.wait(30)
    adder = Worker(
        lambda: runqueue.submit(kind="k", session_id="s1", on_busy="enqueue"), name="adder"
    )
    adder.start()
    assert adder.started_fn.wait(30)
    wait_until(lambda: is_blocked(adder.backend_pid), what="the submit to wait for the end")
    release.set()
    ender.outcome()
    added = adder.outcome()
    assert added.outcome == "enqueued"
    assert (_status(first.id), _status(added.run.id)) == (RunStatus.QUEUED, RunStatus.PENDING)
    _invariants()


def test_a_submit_waiting_on_an_end_that_promotes_nothing_is_the_new_active_run() -> None:
    active = runqueue.submit(kind="k", session_id="s1").run
    ender, ended, release = _held(
        lambda: leases.cancel_in_transaction(active.id, reason="", actor="t"), "ender"
    )
    assert ended.wait(30)
    adder = Worker(
        lambda: runqueue.submit(kind="k", session_id="s1", on_busy="enqueue"), name="adder"
    )
    adder.start()
    assert adder.started_fn.wait(30)
    wait_until(lambda: is_blocked(adder.backend_pid), what="the submit to wait for the end")
    release.set()
    ender.outcome()
    added = adder.outcome()
    assert (added.outcome, _status(added.run.id)) == ("created", RunStatus.QUEUED)
    _invariants()


# --- two transactions ending runs of one session ----------------------------------


def test_a_cancel_of_the_first_pending_turn_while_the_active_run_ends_queues_the_second() -> None:
    """The end steps over the turn the cancel holds (SKIP LOCKED) and
    queues the next: one turn queued, none left behind."""
    active = runqueue.submit(kind="k", session_id="s1").run
    first = runqueue.submit(kind="k", session_id="s1", on_busy="enqueue").run
    second = runqueue.submit(kind="k", session_id="s1", on_busy="enqueue").run
    lease = leases.claim_one("w1")
    canceller, cancelled, release = _held(
        lambda: leases.cancel_in_transaction(first.id, reason="", actor="t"), "canceller"
    )
    assert cancelled.wait(30)
    assert testing.succeed(lease)
    release.set()
    canceller.outcome()
    assert [_status(r) for r in (active.id, first.id, second.id)] == [
        RunStatus.SUCCEEDED,
        RunStatus.CANCELLED,
        RunStatus.QUEUED,
    ]
    _invariants()


def test_a_cancel_of_a_turn_the_end_just_queued_queues_the_next() -> None:
    """The end (held open) queued the first turn; a cancel of that turn
    waits, then finds it the active run and moves the line on."""
    active = runqueue.submit(kind="k", session_id="s1").run
    first = runqueue.submit(kind="k", session_id="s1", on_busy="enqueue").run
    second = runqueue.submit(kind="k", session_id="s1", on_busy="enqueue").run
    ender, ended, release = _held(
        lambda: leases.cancel_in_transaction(active.id, reason="", actor="t"), "ender"
    )
    assert ended.wait(30)
    canceller = Worker(lambda: runqueue.cancel(first.id, reason="", actor="u"), "canceller")
    canceller.start()
    assert canceller.started_fn.wait(30)
    wait_until(lambda: is_blocked(canceller.backend_pid), what="the cancel to wait")
    release.set()
    ender.outcome()
    assert canceller.outcome().status == RunStatus.CANCELLED
    assert (_status(first.id), _status(second.id)) == (RunStatus.CANCELLED, RunStatus.QUEUED)
    _invariants()


@pytest.mark.parametrize("rounds", [15])
def test_cancel_racing_the_finish_of_the_active_run_queues_the_next_turn_once(rounds) -> None:
    """A worker's finish and a staff cancel of the same running run, started
    together on their own connections: one of them ends it, and the next
    turn is queued exactly once."""
    for n in range(rounds):
        session = f"race-{n}"
        runqueue.submit(kind="k", session_id=session)
        nxt = runqueue.submit(kind="k", session_id=session, on_busy="enqueue").run
        lease = leases.claim_one("w1")
        barrier = threading.Barrier(2)

        def finish(lease=lease, barrier=barrier):
            barrier.wait()
            return testing.succeed(lease)

        def cancel(run_id=lease.run_id, barrier=barrier):
            barrier.wait()
            try:
                return runqueue.cancel(run_id, reason="race", actor="staff").status
            except InvalidTransition as exc:
                return exc.status

        workers = [Worker(finish, "finish"), Worker(cancel, "cancel")]
        for w in workers:
            w.start()
        finished, cancelled = (w.outcome() for w in workers)
        # Exactly one of them ended the run.
        assert (finished is True) != (cancelled == RunStatus.CANCELLED), (finished, cancelled)
        assert _status(nxt.id) == RunStatus.QUEUED
        assert EventLog.objects.filter(run_id=nxt.id, type="run.promoted").count() == 1
        assert leases.claim_one("w1").run_id == nxt.id
        _invariants()


# --- many double texts racing a worker ----------------------------------------------


def test_double_texts_racing_a_worker_each_run_once_in_order(settings) -> None:
    """Eight users' threads each send five turns with on_busy enqueue (or
    merge) to one session while a worker thread claims and finishes the
    session's runs as they are queued: afterwards every turn ran exactly
    once, each thread's turns in the order it sent them, and at no check
    did the session have two active runs or a line without an active run."""
    settings.RUNQUEUE = {"SESSION_MAX_PENDING": None}
    senders, per_sender = 8, 5
    start = threading.Barrier(senders + 1)
    done_sending = threading.Event()
    ran: list[list] = []
    violations: list[object] = []

    def send(i: int):
        start.wait()
        for j in range(per_sender):
            runqueue.submit(
                kind="k",
                session_id="chat",
                payload={"from": i, "n": j},
                on_busy="merge" if j % 2 else "enqueue",
            )

    def work():
        start.wait()
        while True:
            lease = leases.claim_one("w1")
            if lease is None:
                if (
                    done_sending.is_set()
                    and not Run.objects.filter(
                        session_id="chat", status__in=[RunStatus.QUEUED, RunStatus.PENDING]
                    ).exists()
                ):
                    return
                continue
            ran.append(turn_payloads(lease.run))
            assert testing.succeed(lease)
            for found in (testing.double_actives(), testing.unpromoted_sessions()):
                if found:
                    violations.append(found)

    threads = [Worker(lambda i=i: send(i), f"sender-{i}") for i in range(senders)]
    worker = Worker(work, "worker")
    for t in [*threads, worker]:
        t.start()
    for t in threads:
        t.outcome(60)
    done_sending.set()
    worker.outcome(60)
    assert violations == []
    payloads = [p for turn in ran for p in turn]
    assert sorted((p["from"], p["n"]) for p in payloads) == [
        (i, j) for i in range(senders) for j in range(per_sender)
    ]
    for i in range(senders):
        mine = [p["n"] for p in payloads if p["from"] == i]
        assert mine == sorted(mine), (i, mine)
    _invariants()
    assert (
        not Run.objects.filter(session_id="chat", status__in=RunStatus.values)
        .exclude(status=RunStatus.SUCCEEDED)
        .exists()
    )
