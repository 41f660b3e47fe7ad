"""A run's log reads the same whether its row or an event row holds an event
(migration 0024; docs/decisions.md, "Claim and success on the run's row"):
a submit, a claim and a success write no event row, the view
``runqueue_event_log`` builds them from the row, and when an attempt ends any
other way its claim becomes an event row under the same id, time and data,
shown once."""

from __future__ import annotations

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.admin import dashboard
from runqueue.leases.claim import statement_params
from runqueue.leases.outcomes import BudgetWait, Failed
from runqueue.models import EventLog, PriorityClass, Run, RunEvent
from runqueue.sql import queries
from tests.helpers import Worker, expire_lease, is_blocked, wait_until

pytestmark = pytest.mark.django_db


def _log(run_id) -> list[tuple]:
    return list(
        EventLog.objects.filter(run_id=run_id)
        .order_by("id")
        .values_list("id", "type", "lease_epoch", "data", "created_at")
    )


def _rows(run_id) -> list[str]:
    rows = RunEvent.objects.filter(run_id=run_id).order_by("id")
    return list(rows.values_list("type", flat=True))


def test_a_run_claimed_once_that_succeeds_writes_no_event_row() -> None:
    run = runqueue.submit(kind="k", priority=12).run
    lease = leases.claim_one("w-log")
    assert lease is not None and lease.run_id == run.id
    testing.succeed(lease, {"ok": True})

    assert _rows(run.id) == []
    (created, claimed, succeeded) = _log(run.id)
    row = Run.objects.get(id=run.id)
    assert created[:4] == (row.created_event_id, "run.created", 0, {"priority": 12})
    assert created[4] == row.created_at
    assert claimed[:3] == (row.claim_event_id, "run.claimed", lease.epoch)
    assert claimed[3] == {
        "owner": "w-log",
        "token": str(lease.token),
        "attempt": 1,
        "priority": 12,
        "wait_ms": row.claim_wait_ms,
    }
    assert claimed[4] == row.claimed_at
    assert succeeded[:4] == (row.success_event_id, "run.succeeded", lease.epoch, {"attempt": 1})
    assert succeeded[4] == row.finished_at
    assert created[0] < claimed[0] < succeeded[0]


def test_a_submit_whose_creation_says_more_writes_it_as_a_row() -> None:
    run = runqueue.submit(kind="k", start_within=60).run
    assert Run.objects.get(id=run.id).created_event_id is None
    assert _rows(run.id) == ["run.created"]
    ((_, type_, _, data, _),) = _log(run.id)
    assert type_ == "run.created" and "start_by" in data


def _end(end: str, lease: leases.Lease) -> None:
    """End the attempt of ``lease`` by the path ``end`` names."""
    failure = leases.permanent_failure(ValueError("no"), lease.attempt)
    if end == "give_up":
        assert leases.give_up(lease, RuntimeError("flaky"))
    elif end == "expire":
        expire_lease(lease.run_id)
        assert leases.sweep()
    elif end == "wait_for_user":
        assert leases.wait_for_user(lease, {"question": "go on?"})
    elif end == "fail":
        assert testing.fail(lease, failure)  # fence_finish
    elif end == "fail_in_round":
        spec = leases.claim_spec("w-log", leases.ALL_CLASSES, limit=1)
        assert leases.finish_and_claim([(lease, Failed(failure))], spec)[0] == [True]
    elif end == "release":
        assert leases.release(lease, "shutdown")
    elif end == "budget_wait":
        assert leases.write(lease, BudgetWait(key="llm", tokens=10, state=None, tool_seq=0))
    elif end == "wait_for_signal":
        assert leases.suspend(lease, "signal", name="go", timeout=60)
    elif end == "signal_waiting":  # in the mailbox already: queued again at once
        leases.signal(lease.run_id, "go", {"n": 1})
        assert leases.suspend(lease, "signal", name="go", timeout=60)
    elif end == "cancel":
        leases.cancel(lease.run_id, reason="test", actor="tests")
    else:
        raise AssertionError(end)


ENDS = ["give_up", "expire", "wait_for_user", "release", "budget_wait", "wait_for_signal",
        "signal_waiting", "cancel"]  # fmt: skip
FAILS = ["fail",
         # The worker's round runs in autocommit, outside a test's transaction.
         pytest.param("fail_in_round", marks=pytest.mark.django_db(transaction=True))]  # fmt: skip


@pytest.mark.parametrize("end", ENDS)
def test_an_attempt_that_ends_otherwise_keeps_its_claim_as_an_event_row(end: str) -> None:
    """The claim the log showed while the run ran is the one it shows after,
    now an event row written by the statement that ended the attempt: same
    id, epoch, data and time; the row lets it go."""
    run = runqueue.submit(kind="k", session_id="conv-log").run
    lease = leases.claim_one("w-log")
    assert lease is not None and lease.run_id == run.id
    (before,) = [e for e in _log(run.id) if e[1] == "run.claimed"]
    assert "run.claimed" not in _rows(run.id)

    _end(end, lease)

    row = Run.objects.get(id=run.id)
    assert row.status != "running"
    assert (row.claim_event_id, row.claimed_at, row.claim_wait_ms) == (None, None, None)
    claims = [e for e in _log(run.id) if e[1] == "run.claimed"]
    assert claims == [before]
    assert _rows(run.id).count("run.claimed") == 1
    ids = [e[0] for e in _log(run.id)]
    assert ids == sorted(set(ids))


@pytest.mark.parametrize("end", FAILS)
def test_a_dead_letter_keeps_its_claim_on_the_row_until_it_is_requeued(end: str) -> None:
    """A handler's failure keeps its claim on the row, as a success does (no
    event row for it); an operator's requeue writes it out as it was, and
    the next claim is the run's second, each shown once."""
    run = runqueue.submit(kind="k").run
    lease = leases.claim_one("w-log")
    assert lease is not None and lease.run_id == run.id
    (before,) = [e for e in _log(run.id) if e[1] == "run.claimed"]

    _end(end, lease)
    row = Run.objects.get(id=run.id)
    assert (row.status, row.claim_event_id, row.lease_owner) == ("failed", before[0], "w-log")
    assert [e for e in _log(run.id) if e[1] == "run.claimed"] == [before]
    assert "run.claimed" not in _rows(run.id)

    leases.requeue(run.id, actor="tests")
    assert Run.objects.get(id=run.id).claim_event_id is None
    assert [e for e in _log(run.id) if e[1] == "run.claimed"] == [before]
    assert _rows(run.id).count("run.claimed") == 1
    again = leases.claim_one("w-again")
    assert again is not None and again.run_id == run.id
    claims = [e for e in _log(run.id) if e[1] == "run.claimed"]
    assert [(c[0] == before[0], c[3]["owner"]) for c in claims] == [
        (True, "w-log"),
        (False, "w-again"),
    ]


def test_a_second_attempt_has_a_claim_of_its_own() -> None:
    run = runqueue.submit(kind="k").run
    first = leases.claim_one("w-1")
    assert first is not None
    assert leases.give_up(first, RuntimeError("flaky"))
    Run.objects.filter(id=run.id).update(scheduled_for=None)
    second = leases.claim_one("w-2")
    assert second is not None and second.run_id == run.id
    testing.succeed(second, None)

    claims = [e for e in _log(run.id) if e[1] == "run.claimed"]
    assert [(c[2], c[3]["owner"], c[3]["attempt"]) for c in claims] == [
        (first.epoch, "w-1", 1),
        (second.epoch, "w-2", 2),
    ]
    assert [e[1] for e in _log(run.id)][-1] == "run.succeeded"


def test_the_dashboard_counts_the_claims_rows_hold() -> None:
    """Claim latency reads claims wherever they are: a running run's row, a
    succeeded run's row (through its finished day), an event row."""
    runs = [runqueue.submit(kind="k", priority=25).run for _ in range(3)]
    held = [leases.claim_one("w-log") for _ in runs]
    assert all(lease is not None for lease in held)
    testing.succeed(held[0], None)  # its row, in the finished day
    assert leases.give_up(held[1], RuntimeError("flaky"))  # an event row
    # held[2] runs: its row, in the live partition
    stats = {s.cls: s for s in dashboard.class_stats()}[PriorityClass.MAINTENANCE]
    assert stats.claims == 3
    assert stats.p99_ms is not None and stats.p99_ms < 30_000


@pytest.mark.django_db(transaction=True)
def test_a_cancel_that_waits_for_a_claim_writes_that_claim_out(raw_connect) -> None:
    """A cancel whose statement began while the run was queued, and met the
    claim still committing, cancels the running run: the claim it takes off
    the row is the one that claim wrote (the cancel locks the row and reads
    it after the wait), once, not the empty claim of the queued row."""
    run = runqueue.submit(kind="k").run
    claimer = raw_connect(autocommit=False)
    spec = leases.claim_spec("w-race", leases.ALL_CLASSES, limit=1)
    (claimed,) = claimer.execute(queries()["claim"], statement_params((), spec)).fetchall()
    canceller = Worker(lambda: leases.cancel(run.id, reason="race", actor="tests"), "canceller")
    canceller.start()
    canceller.started_fn.wait(10)
    wait_until(lambda: is_blocked(canceller.backend_pid), what="the cancel to wait for the claim")
    claimer.commit()

    assert canceller.outcome().status == "cancelled"
    claims = [e for e in _log(run.id) if e[1] == "run.claimed"]
    assert [(c[2], c[3]["owner"]) for c in claims] == [(1, "w-race")]
    assert _rows(run.id).count("run.claimed") == 1
