"""Run deadlines on real PostgreSQL: ``start_within`` (a run not claimed in
time is cancelled as expired, its session freed, its parent's fan-in
counted; claimed or expired, never both, raced on real connections), the
first start only, and the bad values every entry point refuses with
nothing written. ``max_duration`` in a real worker:
tests/workers/test_deadlines_workers.py."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time

import pytest
from django.db import connection
from django.test import override_settings

import runqueue
from runqueue import leases, registry, runtime
from runqueue.errors import EXPIRED, ActiveRunConflict, InvalidSubmission
from runqueue.leases.outcomes import Suspended
from runqueue.limits import MAX_WAIT_SECONDS
from runqueue.models import EventLog, PriorityClass, Run, RunStatus
from runqueue.submission.submit import SubmitRequest
from tests.helpers import Worker, expire_lease, is_blocked, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_ledger")]

INTER, ASYNC = PriorityClass.INTERACTIVE, PriorityClass.ASYNC


def _past_start_by(*run_ids) -> None:
    """Move start deadlines into the past on the database clock (test-only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET start_by = now() - interval '1 second' WHERE id = ANY(%s)",
            [list(run_ids)],
        )


def _db_passed(run_id) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT start_by <= now() FROM runqueue_run WHERE id = %s", [run_id])
        return cursor.fetchone()[0]


def _events(run_id, type_: str) -> list[dict]:
    return list(
        EventLog.objects.filter(run_id=run_id, type=type_)
        .order_by("id")
        .values_list("data", flat=True)
    )


# --- expiry -------------------------------------------------------------------


def test_a_run_not_claimed_in_time_is_cancelled_as_expired_and_frees_its_session() -> None:
    # A second: long enough that the conflicting submit below meets the run
    # before its deadline on a loaded host (one that meets it after expires
    # it and creates a new run, as designed).
    run = runqueue.submit(kind="k", session_id="s1", start_within=1.0).run
    assert run.start_by is not None
    with pytest.raises(ActiveRunConflict):
        runqueue.submit(kind="k", session_id="s1")
    wait_until(lambda: _db_passed(run.id), what="the start deadline to pass", timeout=10)
    assert leases.expire_unstarted() == [run.id]
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.finished_at is not None
    assert run.failure["classification"] == EXPIRED
    (event,) = _events(run.id, "run.cancelled")
    assert event["reason"] == "expired"
    # Its session slot is free: the next turn is a new run.
    assert runqueue.submit(kind="k", session_id="s1").outcome == "created"
    assert leases.expire_unstarted() == []


def test_the_claim_never_takes_a_run_past_its_start_deadline() -> None:
    late = runqueue.submit(kind="k", start_within=60).run
    fresh = runqueue.submit(kind="k", start_within=60).run
    _past_start_by(late.id)
    # Before the deadline service has looked: the claim steps over it.
    lease = leases.claim_one("w1")
    assert lease is not None and lease.run_id == fresh.id
    assert leases.claim_one("w1") is None
    assert Run.objects.get(id=late.id).status == RunStatus.QUEUED


def test_the_capped_claim_never_takes_a_run_past_its_start_deadline() -> None:
    with override_settings(RUNQUEUE={"CONCURRENCY": {"interactive": 5}}):
        late = runqueue.submit(kind="k", start_within=60).run
        fresh = runqueue.submit(kind="k", start_within=60).run
        _past_start_by(late.id)
        lease = leases.claim_one("w1")
        assert lease is not None and lease.run_id == fresh.id
        assert leases.claim_one("w1") is None


def test_the_deadline_counts_from_when_the_run_is_due() -> None:
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    run = runqueue.submit(kind="k", scheduled_for=later, start_within=60).run
    assert run.start_by is not None
    assert run.start_by - run.scheduled_for == dt.timedelta(seconds=60)


def test_a_run_claimed_once_is_never_expired() -> None:
    """The deadline is for the first start: a run the sweeper gives back
    to the queue, or a worker releases, is not expired by it."""
    run = runqueue.submit(kind="k", start_within=60).run
    lease = leases.claim_one("w1")
    assert lease is not None
    assert Run.objects.get(id=run.id).start_by is None
    expire_lease(run.id)
    assert leases.sweep()
    Run.objects.filter(id=run.id).update(scheduled_for=None)
    assert leases.expire_unstarted() == []
    again = leases.claim_one("w2")
    assert again is not None and again.run_id == run.id


def test_an_expired_child_counts_in_its_parents_fan_in() -> None:
    runqueue.submit(kind="test.fanout")
    lease = leases.claim_one("w1", [INTER])
    assert lease is not None
    ctx = runtime.build_context(lease)
    children = [ctx.spawn("test.stale_turn", {"i": i}, priority=ASYNC) for i in range(2)]
    # The kind's default (@handler(..., start_within=30)).
    assert all(Run.objects.get(id=c).start_by is not None for c in children)
    assert leases.write(lease, Suspended(reason="children", state={}))
    _past_start_by(*children)
    assert sorted(leases.expire_unstarted()) == sorted(children)
    parent = Run.objects.get(id=lease.run_id)
    assert (parent.status, parent.children_open) == (RunStatus.QUEUED, 0)
    assert len(_events(parent.id, "run.resumed")) == 1


def test_the_deadline_service_expires_a_run_on_its_own() -> None:
    from runqueue.worker.deadlines import Deadlines

    run = runqueue.submit(kind="k", start_within=0.2).run
    until = threading.Event()
    service = Deadlines(until)
    service.start()
    try:
        wait_until(
            lambda: Run.objects.get(id=run.id).status == RunStatus.CANCELLED,
            what="the deadline service to expire the run",
            timeout=10,
        )
    finally:
        until.set()
        service.join(10)
    assert service.expired == 1


@pytest.mark.parametrize("iteration", range(12))
def test_claims_racing_the_expiry_claim_or_expire_each_run_never_both(iteration: int) -> None:
    """A claimer and the expiry, each on its own connection, both spinning
    across the deadlines of 60 runs (spread over 60 ms, on the database
    clock): each run ends claimed or expired, exactly once."""
    requests = [SubmitRequest(kind="k", start_within=60)] * 60
    runs = [r.run.id for r in runqueue.submit_many(requests)]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run r SET start_by = clock_timestamp()"
            " + make_interval(secs => 0.005 + 0.001 * (SELECT count(*) FROM runqueue_run q"
            "                                            WHERE q.id < r.id))"
            " WHERE id = ANY(%s)",
            [runs],
        )
    barrier = threading.Barrier(2)
    end = time.monotonic() + 20
    claimed: list = []
    expired: list = []

    def open_runs() -> bool:
        return Run.objects.filter(id__in=runs, status=RunStatus.QUEUED).exists()

    def claimer() -> None:
        barrier.wait(10)
        while time.monotonic() < end:
            got = leases.claim(f"racer-{iteration}", limit=1)
            claimed.extend(lease.run_id for lease in got)
            if not got and not open_runs():
                return

    def expirer() -> None:
        barrier.wait(10)
        while time.monotonic() < end:
            got = leases.expire_unstarted(limit=1)
            expired.extend(got)
            if not got and not open_runs():
                return

    workers = [Worker(claimer, "claimer"), Worker(expirer, "expirer")]
    for w in workers:
        w.start()
    for w in workers:
        w.outcome()
    assert sorted(claimed + expired) == sorted(runs), "a run claimed and expired, or neither"
    statuses = dict(Run.objects.filter(id__in=runs).values_list("id", "status"))
    assert {statuses[r] for r in claimed} <= {RunStatus.RUNNING}
    assert {statuses[r] for r in expired} <= {RunStatus.CANCELLED}
    both = EventLog.objects.filter(run_id__in=expired, type="run.claimed")
    assert not both.exists()


_PAUSE_DDL = """
CREATE OR REPLACE FUNCTION runqueue_test_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.type = TG_ARGV[0] AND NEW.run_id::text = TG_ARGV[1] THEN
        PERFORM pg_advisory_xact_lock(4242);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER runqueue_test_pause BEFORE INSERT ON runqueue_run_event
    FOR EACH ROW EXECUTE FUNCTION runqueue_test_pause('{event}', '{run_id}');
"""

#: A claim writes no event row (its run.claimed is the run's row, migration
#: 0024): the claim pauses once it has updated the row.
_PAUSE_CLAIM_DDL = """
CREATE OR REPLACE FUNCTION runqueue_test_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'running' AND NEW.id::text = TG_ARGV[0] THEN
        PERFORM pg_advisory_xact_lock(4242);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER runqueue_test_pause AFTER UPDATE ON runqueue_run
    FOR EACH ROW EXECUTE FUNCTION runqueue_test_pause('{run_id}');
"""


class _Pause:
    """``pause(run_id, event_type)``: the statement that logs that event for
    that run waits there, holding what it wrote uncommitted, until
    ``release()`` (a test-only trigger and an advisory lock)."""

    def __init__(self) -> None:
        from runqueue import db

        self.held = db.connect()
        self.held.execute("SELECT pg_advisory_lock(4242)")

    def __call__(self, run_id, event_type: str) -> None:
        ddl = _PAUSE_CLAIM_DDL if event_type == "run.claimed" else _PAUSE_DDL
        with connection.cursor() as cursor:
            cursor.execute(ddl.format(event=event_type, run_id=run_id))

    def release(self) -> None:
        self.held.execute("SELECT pg_advisory_unlock(4242)")


@pytest.fixture
def pause_at():
    pause = _Pause()
    yield pause
    pause.held.close()
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS runqueue_test_pause ON runqueue_run_event")
        cursor.execute("DROP TRIGGER IF EXISTS runqueue_test_pause ON runqueue_run")
        cursor.execute("DROP FUNCTION IF EXISTS runqueue_test_pause()")


def test_a_claim_holding_the_run_as_its_deadline_passes_keeps_it(pause_at) -> None:
    """The claim has taken the run (uncommitted) when the deadline passes:
    the expiry steps over it, and once the claim commits finds it running."""
    run = runqueue.submit(kind="k", start_within=60).run
    pause_at(run.id, "run.claimed")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET start_by = clock_timestamp() + interval '1 second'"
            " WHERE id = %s",
            [run.id],
        )
    claimer = Worker(lambda: leases.claim_one("w1"), "claimer")
    claimer.start()
    claimer.started_fn.wait(10)
    wait_until(lambda: is_blocked(claimer.backend_pid), what="the claim to pause")
    # The deadline passes while the claim holds the row (read on the clock,
    # the row left alone).
    wait_until(lambda: _db_passed(run.id), what="the deadline to pass", timeout=10)
    expirer = Worker(leases.expire_unstarted, "expirer")
    expirer.start()
    expirer.started_fn.wait(10)
    # The expiry must not wait for the claim's row, nor take it after.
    wait_until(
        lambda: not expirer.is_alive() or is_blocked(expirer.backend_pid),
        what="the expiry to end or block",
    )
    pause_at.release()
    lease = claimer.outcome()
    assert lease is not None and lease.run_id == run.id
    assert expirer.outcome() == []
    assert leases.expire_unstarted() == []
    types = set(EventLog.objects.filter(run_id=run.id).values_list("type", flat=True))
    assert Run.objects.get(id=run.id).status == RunStatus.RUNNING
    assert "run.cancelled" not in types


def test_an_expiry_holding_the_run_keeps_it_from_the_claim(pause_at) -> None:
    run = runqueue.submit(kind="k", start_within=60).run
    _past_start_by(run.id)
    pause_at(run.id, "run.cancelled")
    expirer = Worker(leases.expire_unstarted, "expirer")
    expirer.start()
    expirer.started_fn.wait(10)
    wait_until(lambda: is_blocked(expirer.backend_pid), what="the expiry to pause")
    assert leases.claim_one("w1") is None
    pause_at.release()
    assert expirer.outcome() == [run.id]
    assert leases.claim_one("w1") is None
    assert Run.objects.get(id=run.id).status == RunStatus.CANCELLED


# --- bad input ------------------------------------------------------------------


BAD = [0, -1, math.nan, math.inf, MAX_WAIT_SECONDS + 1, True, "10", dt.timedelta(0)]


@pytest.mark.parametrize("field", ["start_within", "max_duration"])
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_bad_deadlines_are_refused_with_nothing_written(field: str, value: object) -> None:
    with pytest.raises(InvalidSubmission) as info:
        runqueue.submit(kind="k", **{field: value})
    assert info.value.field == field
    with pytest.raises(InvalidSubmission):
        runqueue.submit_many([SubmitRequest(kind="k"), SubmitRequest(kind="k", **{field: value})])
    with pytest.raises(ValueError, match=field):
        registry.handler("test.bad_deadline", **{field: value})
    assert not Run.objects.exists()


def test_deadlines_take_seconds_or_a_timedelta_and_the_submits_win() -> None:
    (a, b) = runqueue.submit_many(
        [
            SubmitRequest(kind="test.stale_turn", max_duration=dt.timedelta(minutes=2)),
            SubmitRequest(kind="test.stale_turn", start_within=5, max_duration=1.5),
        ]
    )
    assert a.run.max_duration == 120.0
    assert b.run.max_duration == 1.5
    assert b.run.start_by - b.run.created_at < a.run.start_by - a.run.created_at


def test_the_projects_defaults_apply_when_neither_submit_nor_kind_says() -> None:
    with override_settings(RUNQUEUE={"START_WITHIN_SECONDS": 90, "MAX_DURATION_SECONDS": 30}):
        run = runqueue.submit(kind="k").run
    assert run.max_duration == 30.0
    assert dt.timedelta(seconds=89) < run.start_by - run.created_at <= dt.timedelta(seconds=91)
    assert Run.objects.get(id=run.id).max_duration == 30.0
    plain = runqueue.submit(kind="k").run
    assert (plain.start_by, plain.max_duration) == (None, None)


# --- the HTTP API -----------------------------------------------------------------


def test_the_api_takes_start_within_in_seconds(client) -> None:
    from tests.api_helpers import make_caller, submit

    alice = make_caller("alice", "acme")
    response = submit(client, alice, {"kind": "test.echo", "start_within": 30})
    assert response.status_code == 201, response.content
    body = response.json()
    run = Run.objects.get(id=body["id"])
    assert run.start_by is not None
    assert body["start_by"] is not None


@pytest.mark.parametrize("value", [0, -5, "30", True, 1e300, {"s": 1}])
def test_the_api_refuses_a_bad_start_within_with_nothing_written(client, value) -> None:
    from tests.api_helpers import make_caller, problem, submit

    alice = make_caller("alice", "acme")
    response = submit(client, alice, {"kind": "test.echo", "start_within": value})
    errors = problem(response, 422, "validation-failed")["errors"]
    assert [e["pointer"] for e in errors] == ["/start_within"]
    assert not Run.objects.exists()
