"""``ctx.schedule``: an agent sets its own reminder, recorded in its call
order (a retry gets the same schedule back), through the fence; a run a
schedule started may not make schedules unless that schedule allows it,
and a tenant's handlers own a bounded number (issue 49 item 3)."""

from __future__ import annotations

import datetime as dt

import pytest

import runqueue
from runqueue import leases, runtime, schedules, testing
from runqueue.db import db_now
from runqueue.errors import InvalidSubmission, PermanentError, ScheduleRefused
from runqueue.models import Run, RunStatus, Schedule, ToolInvocation
from runqueue.runtime import RunContext
from runqueue.schedules import owned
from runqueue.schedules.requests import check_request, keyed_id
from tests.helpers import claimed

pytestmark = pytest.mark.django_db


@runqueue.handler("sched.remind")
def remind(ctx: RunContext) -> dict:
    """Set a reminder in this conversation an hour from now."""
    made = ctx.schedule(
        "test.echo",
        {"remind": "call back"},
        run_at=dt.timedelta(hours=1),
        session_id=ctx.run.session_id,
    )
    return {"schedule": str(made)}


def test_a_handler_sets_its_own_reminder_for_its_session() -> None:
    run = runqueue.submit(
        kind="sched.remind", session_id="chat-9", tenant="acme", principal="user:1"
    ).run
    assert testing.execute(claimed("w1", run_id=run.id)) == "succeeded"
    run.refresh_from_db()
    schedule = Schedule.objects.get()
    assert run.result == {"schedule": schedule.name.removeprefix("api:")}
    assert (schedule.source, schedule.tenant, schedule.created_by) == (
        "handler",
        "acme",
        f"run:{run.id}",
    )
    assert (schedule.session_id, schedule.on_busy, schedule.cron) == ("chat-9", "enqueue", "")
    assert schedule.run_at == schedule.next_fire_at and schedule.run_at > db_now()
    step = ToolInvocation.objects.get(run_id=run.id)
    assert (step.tool, step.status) == (owned.SCHEDULE_TOOL, "completed")

    # The reminder arrives as the conversation's next turn.
    (fired,) = schedules.tick(now=schedule.run_at + dt.timedelta(seconds=1))
    turn = Run.objects.get(id=fired.run_id)
    assert (turn.session_id, turn.kind, turn.payload) == (
        "chat-9",
        "test.echo",
        {"remind": "call back"},
    )
    assert turn.status == RunStatus.QUEUED


def test_a_retried_attempt_gets_the_same_schedule_back() -> None:
    run = runqueue.submit(kind="sched.remind", tenant="acme").run
    lease = claimed("w1", run_id=run.id)
    first = runtime.build_context(lease).schedule("test.echo", cron="0 9 * * *")
    # The worker lets the run go; the next attempt's call #0 is recorded.
    assert leases.release(lease, "worker stopping")
    second = claimed("w1", run_id=run.id)
    again = runtime.build_context(second).schedule("test.echo", cron="0 9 * * *")
    assert first == again and Schedule.objects.count() == 1
    # Code that now makes another call at #0 is told, not given a second schedule.
    assert leases.release(second, "worker stopping")
    third = runtime.build_context(claimed("w1", run_id=run.id))
    with pytest.raises(PermanentError, match="a handler must make its calls in the same order"):
        third.schedule("test.fail", cron="0 9 * * *")
    assert Schedule.objects.count() == 1


def test_bad_arguments_raise_and_write_nothing() -> None:
    run = runqueue.submit(kind="sched.remind", tenant="acme").run
    ctx = runtime.build_context(claimed("w1", run_id=run.id))
    with pytest.raises(InvalidSubmission, match="cron: '0 9' has 2 fields"):
        ctx.schedule("test.echo", cron="0 9")
    with pytest.raises(InvalidSubmission, match="run_at: is in the past"):
        ctx.schedule("test.echo", run_at=dt.timedelta(hours=-1))
    assert not Schedule.objects.exists() and not ToolInvocation.objects.exists()


def _scheduled_run(*, runs_may_schedule: bool) -> Run:
    """A sched.remind run fired by an API schedule that does (or does not)
    let its runs make schedules."""
    now = db_now()
    request, problems = check_request(
        kind="sched.remind",
        priority=0,
        run_at=now + dt.timedelta(minutes=5),
        runs_may_schedule=runs_may_schedule,
        tenant="acme",
        now=now,
    )
    assert request is not None, problems
    parent, _ = owned.create(
        request,
        schedule_id=keyed_id("acme", "user:1", f"k-{runs_may_schedule}"),
        tenant="acme",
        created_by="user:1",
        token=None,
        key=f"k-{runs_may_schedule}",
    )
    (tick,) = schedules.tick(now=parent.run_at + dt.timedelta(seconds=1))
    return Run.objects.get(id=tick.run_id)


def test_a_run_a_schedule_started_may_not_schedule_unless_allowed() -> None:
    run = _scheduled_run(runs_may_schedule=False)
    assert testing.execute(claimed("w1", run_id=run.id)) == "failed"
    run.refresh_from_db()
    assert run.failure["error_type"] == "ScheduleRefused"
    assert (
        "does not let its runs make schedules (runs_may_schedule is false)"
        in (run.failure["message"])
    )
    assert Schedule.objects.count() == 1  # the parent alone

    allowed = _scheduled_run(runs_may_schedule=True)
    assert testing.execute(claimed("w1", run_id=allowed.id)) == "succeeded"
    assert Schedule.objects.filter(source="handler").count() == 1


def test_a_tenants_handlers_own_a_bounded_number_of_schedules(settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "HANDLER_SCHEDULES_PER_TENANT": 1}
    run = runqueue.submit(kind="sched.remind", tenant="acme").run
    ctx = runtime.build_context(claimed("w1", run_id=run.id))
    ctx.schedule("test.echo", cron="0 9 * * *")
    with pytest.raises(ScheduleRefused, match="already own 1 schedules"):
        ctx.schedule("test.echo", cron="0 10 * * *")
    assert Schedule.objects.count() == 1
    # Another tenant's handlers have their own.
    other = runqueue.submit(kind="sched.remind", tenant="other").run
    runtime.build_context(claimed("w1", run_id=other.id)).schedule("test.echo", cron="0 9 * * *")
    assert Schedule.objects.count() == 2
