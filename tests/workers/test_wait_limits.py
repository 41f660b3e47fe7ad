"""Out-of-range waits are refused where the handler asks for them, and one
run's outcome that cannot be written never costs another run its own.

A timeout or a time PostgreSQL cannot add to ``now()`` (or Python cannot
read back) used to pass the runtime's checks and fail in the slot group's
round, which then reported every outcome of that round as an error and left
them all to lease expiry."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

import runqueue
from runqueue import leases, runtime, testing
from runqueue.leases.outcomes import Reported, Succeeded, Suspended, Waiting
from runqueue.limits import MAX_WAIT_SECONDS
from runqueue.models import PriorityClass, Run, RunStatus
from runqueue.worker.group import Group, GroupConfig
from tests.helpers import claimed, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

INTER = PriorityClass.INTERACTIVE
LIMIT = f"at most {MAX_WAIT_SECONDS:.0f} seconds (100 years)"
#: 23:00 on 9999-12-31 five hours west of UTC: 04:00 on 10000-01-01 in UTC.
PAST_9999 = dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(dt.timedelta(hours=-5)))

#: What each entry point is asked for, by name (a payload holds JSON only).
BAD_WAITS: dict[str, Any] = {
    "ask_user_seconds": lambda ctx: ctx.ask_user("?", timeout=1e13),
    "ask_user_timedelta_max": lambda ctx: ctx.ask_user("?", timeout=dt.timedelta.max),
    "signal_seconds": lambda ctx: ctx.wait_for_signal("go", timeout=1e13),
    "signal_timedelta_max": lambda ctx: ctx.wait_for_signal("go", timeout=dt.timedelta.max),
    "signal_just_over": lambda ctx: ctx.wait_for_signal("go", timeout=MAX_WAIT_SECONDS + 1),
    "sleep_past_9999": lambda ctx: ctx.sleep_until(PAST_9999),
}
MESSAGES = {
    "sleep_past_9999": "sleep_until's time must fall between 0001-01-01 and 9999-12-31 in UTC",
}


@runqueue.handler("limits.bad_wait")
def bad_wait(ctx: runtime.RunContext) -> Any:
    return BAD_WAITS[ctx.payload["how"]](ctx)


@runqueue.handler("limits.async_bad_wait")
async def async_bad_wait(ctx: runtime.AsyncRunContext) -> Any:
    return BAD_WAITS[ctx.payload["how"]](ctx)


@runqueue.handler("limits.far_sleep")
def far_sleep(ctx: runtime.RunContext) -> Any:
    """Sleeps until the last second Python can read back, then returns."""
    if ctx.state is None:
        until = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
        return ctx.sleep_until(until, state={"slept": True})
    return {"timed_out": ctx.timed_out}


@runqueue.handler("limits.long_wait")
def long_wait(ctx: runtime.RunContext) -> Any:
    """The longest timeout allowed, as a number and as a timedelta."""
    if ctx.payload["how"] == "ask":
        return ctx.ask_user("?", timeout=dt.timedelta(seconds=MAX_WAIT_SECONDS))
    return ctx.wait_for_signal("go", timeout=MAX_WAIT_SECONDS)


@pytest.mark.parametrize("how", sorted(BAD_WAITS))
@pytest.mark.parametrize("kind", ["limits.bad_wait", "limits.async_bad_wait"])
def test_an_out_of_range_wait_fails_only_its_run_at_the_call(kind: str, how: str) -> None:
    """A ValueError naming the limit, raised by the ctx call: bad input, so
    the run fails at once (one attempt, no lease expiry)."""
    run = runqueue.submit(kind=kind, payload={"how": how}).run
    assert testing.execute(claimed(classes=[INTER])) == "failed"
    failed = Run.objects.get(id=run.id)
    assert (failed.status, failed.attempts) == (RunStatus.FAILED, 1)
    assert failed.failure["classification"] == "permanent"
    assert failed.failure["error_type"] == "ValueError"
    assert MESSAGES.get(how, LIMIT) in failed.failure["message"]


@pytest.mark.parametrize("how", ["ask", "signal"])
def test_the_longest_timeout_allowed_is_written(how: str) -> None:
    run = runqueue.submit(kind="limits.long_wait", payload={"how": how}).run
    assert testing.execute(claimed(classes=[INTER])) == "waiting"
    waiting = Run.objects.get(id=run.id)
    assert waiting.wait_until is not None
    assert waiting.wait_until - waiting.waiting_since == pytest.approx(
        dt.timedelta(seconds=MAX_WAIT_SECONDS), abs=dt.timedelta(seconds=5)
    )
    runqueue.cancel(run.id, reason="done", actor="t")


def test_a_sleep_until_the_end_of_9999_waits_and_its_run_stays_readable() -> None:
    run = runqueue.submit(kind="limits.far_sleep").run
    assert testing.execute(claimed(classes=[INTER])) == "waiting"
    waiting = Run.objects.get(id=run.id)
    assert waiting.wait_until == dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
    assert leases.next_deadline() > 0
    assert leases.resume_due() == 0
    runqueue.cancel(run.id, reason="done", actor="t")


def test_a_direct_wait_for_user_refuses_the_timeout_before_writing() -> None:
    runqueue.submit(kind="limits.long_wait", payload={"how": "ask"})
    lease = claimed(classes=[INTER])
    with pytest.raises(ValueError, match=LIMIT.replace("(", r"\(").replace(")", r"\)")):
        leases.wait_for_user(lease, "?", timeout=1e13)
    assert Run.objects.get(id=lease.run_id).status == RunStatus.RUNNING


def test_backoff_never_overflows(settings) -> None:
    """A fractional base and a run on its thousandth attempt: the cap, not
    an OverflowError that would stop the sweep for every run."""
    settings.RUNQUEUE = {"BACKOFF_BASE_SECONDS": 0.5, "BACKOFF_JITTER": 0}
    assert leases.backoff(5000) == 600
    assert leases.backoff(2) == 1.0


@pytest.mark.parametrize("name", ["BACKOFF_MAX_SECONDS", "BACKOFF_BASE_SECONDS", "LEASE_SECONDS"])
def test_a_seconds_setting_past_the_limit_is_refused(settings, name: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from runqueue.conf import get_settings

    settings.RUNQUEUE = {name: 1e13}
    with pytest.raises(ImproperlyConfigured, match=f"RUNQUEUE\\['{name}'\\] must be at most"):
        get_settings()


# --- the slot group's round ------------------------------------------------------


@pytest.fixture
def refusing_database() -> Iterator[None]:
    """Triggers that make PostgreSQL itself refuse a marked value: a
    checkpoint state or a run result holding "refuse" raises that SQLSTATE
    (a data exception, 22003, or a lock not available, 55P03), as a value
    past every check would."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION runqueue_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE doc jsonb := to_jsonb(NEW) -> (CASE TG_TABLE_NAME
                                 WHEN 'runqueue_checkpoint' THEN 'state' ELSE 'result' END);
            BEGIN
                IF jsonb_typeof(doc) = 'object' AND doc ? 'refuse' THEN
                    RAISE EXCEPTION 'refused for the test: out of range'
                          USING ERRCODE = doc->>'refuse';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER runqueue_test_refuse BEFORE INSERT OR UPDATE ON runqueue_checkpoint
                FOR EACH ROW EXECUTE FUNCTION runqueue_test_refuse();
            CREATE TRIGGER runqueue_test_refuse BEFORE UPDATE ON runqueue_run
                FOR EACH ROW EXECUTE FUNCTION runqueue_test_refuse();
            """
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER runqueue_test_refuse ON runqueue_checkpoint;"
            "DROP TRIGGER runqueue_test_refuse ON runqueue_run;"
            "DROP FUNCTION runqueue_test_refuse();"
        )


def _group() -> Group:
    config = GroupConfig(
        label="interactive",
        classes=(INTER,),
        size=4,
        owner="w/interactive",
        lease_seconds=30,
        poll_seconds=30,
    )
    reported: list = []
    group = Group(config, finished=lambda lease, label: reported.append((lease.run_id, label)))
    group.reported = reported  # type: ignore[attr-defined]
    return group


def _claimed(n: int) -> list[leases.Lease]:
    ids = [runqueue.submit(kind="test.echo", payload={"i": i}).run.id for i in range(n)]
    claimed = {lease.run_id: lease for lease in leases.claim("w/interactive", [INTER], limit=n)}
    return [claimed[i] for i in ids]


def _statuses(*held: leases.Lease) -> list[str]:
    found = dict(Run.objects.filter(id__in=[h.run_id for h in held]).values_list("id", "status"))
    return [found[h.run_id] for h in held]


@pytest.mark.usefixtures("refusing_database")
def test_one_runs_refused_outcome_leaves_the_rest_of_the_round_written() -> None:
    """One round carries two successes, a wait for the user, a wait whose
    checkpoint PostgreSQL refuses as bad data and one whose write meets a
    lock it cannot take: the good ones are written; the bad data fails its
    run at once with a failure record that says why; the lock error leaves
    its run alone to lease expiry (it may pass next time)."""
    good, asks, bad, locked, also_good = _claimed(5)
    group = _group()
    outcomes = [
        (good, Succeeded.of({"ok": 1})),
        (bad, Suspended(reason="signal", wait_name="go", state={"refuse": "22003"})),
        (asks, Waiting(question="?", state=None, tool_seq=0)),
        (locked, Suspended(reason="signal", wait_name="go", state={"refuse": "55P03"})),
        (also_good, Succeeded.of({"ok": 2})),
    ]
    assert group._round(outcomes, 0) == []
    assert _statuses(good, asks, bad, locked, also_good) == [
        RunStatus.SUCCEEDED,
        RunStatus.WAITING_FOR_USER,
        RunStatus.FAILED,
        RunStatus.RUNNING,  # its lease expires; the sweeper requeues it
        RunStatus.SUCCEEDED,
    ]
    failure = Run.objects.get(id=bad.run_id).failure
    assert failure["classification"] == "permanent"
    assert failure["message"].startswith(
        "the run's waiting outcome could not be written: refused for the test: out of range"
    )
    assert dict(group.reported) == {
        good.run_id: Reported.SUCCEEDED,
        asks.run_id: Reported.WAITING,
        bad.run_id: Reported.FAILED,
        locked.run_id: Reported.ERROR,
        also_good.run_id: Reported.SUCCEEDED,
    }


@pytest.mark.usefixtures("refusing_database")
@pytest.mark.parametrize("want", [1, 0])
def test_a_finish_the_database_refuses_costs_the_finishes_beside_it_nothing(want: int) -> None:
    """Successes are written together with the next claim, in one
    statement: one the database refuses makes the group write them one at a
    time, and still claim (if it was claiming)."""
    first, bad, last = _claimed(3)
    runqueue.submit(kind="test.echo", payload={"next": True})
    group = _group()
    outcomes = [
        (first, Succeeded.of({"ok": 1})),
        (bad, Succeeded.of({"refuse": "22003"})),
        (last, Succeeded.of({"ok": 3})),
    ]
    claimed = group._round(outcomes, want)
    assert [lease.run.payload for lease in claimed] == [{"next": True}] * want
    assert _statuses(first, bad, last) == [
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.SUCCEEDED,
    ]
    message = Run.objects.get(id=bad.run_id).failure["message"]
    assert message.startswith("the run's succeeded outcome could not be written: refused")
    assert dict(group.reported)[bad.run_id] == Reported.FAILED


def test_a_worker_fails_the_bad_wait_once_and_finishes_the_others(start_worker) -> None:
    """A real worker: the run that asks for 1e13 seconds fails on its first
    attempt; the runs beside it succeed."""
    bad = runqueue.submit(kind="test.huge_timeout").run
    good = [runqueue.submit(kind="test.echo", payload={"i": i}).run for i in range(4)]
    worker = start_worker("--slots", "interactive=4", "--burst")
    assert worker.wait(60) == 0, worker.output()
    wait_until(
        lambda: Run.objects.filter(id__in=[r.id for r in good], status="succeeded").count() == 4,
        what="the good runs",
    )
    failed = Run.objects.get(id=bad.id)
    assert (failed.status, failed.attempts) == (RunStatus.FAILED, 1)
    assert LIMIT in failed.failure["message"]
