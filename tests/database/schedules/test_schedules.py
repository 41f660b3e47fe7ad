"""Recurring schedules: cron through cronsim, catch-up policies and DST with a
clock the test controls, settings synced into rows, pause, resume, run now."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction

from runqueue import schedules, testing
from runqueue.conf import parse
from runqueue.models import EventLog, QueueEvent, Run, Schedule, ScheduleTick
from runqueue.schedules import cron

pytestmark = pytest.mark.django_db

UTC = dt.UTC
T0 = dt.datetime(2026, 5, 4, 12, 0, 30, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)


def make(name: str = "hourly", expr: str = "0 * * * *", *, at=T0, **fields) -> Schedule:
    """An admin schedule whose cursor is ``at``: its first tick is the next after.
    Runs may overlap (these tests are about ticks; overlap has its own)."""
    values = {"kind": "test.echo", "payload": {"n": 1}, "timezone": "UTC", "overlap": "allow"}
    values |= fields
    return schedules.save_definition(Schedule(name=name, cron=expr, handled_until=at, **values))


def ticks_fired(schedule: Schedule) -> list[dt.datetime]:
    return list(
        schedule.ticks.filter(outcome="fired")
        .order_by("tick_at")
        .values_list("tick_at", flat=True)
    )


def skipped(schedule: Schedule) -> list[tuple[dt.datetime, dt.datetime]]:
    rows = schedule.ticks.filter(outcome="skipped").order_by("tick_at")
    return [(r.tick_at, r.skipped_before) for r in rows]


# --- cron through cronsim -------------------------------------------------------


def test_cron_is_validated_and_explained_by_cronsim() -> None:
    assert cron.validate(" 0  3 * * * ") == "0 3 * * *"
    assert cron.explain("0 3 * * *") == "At 03:00 every day"
    with pytest.raises(ValueError, match="has 4 fields; a cron expression has five"):
        cron.validate("0 3 * *")
    with pytest.raises(ValueError, match="has 6 fields"):
        cron.validate("0 0 3 * * *")
    with pytest.raises(
        ValueError, match="'61 \\* \\* \\* \\*' is not a valid cron expression: Bad minute"
    ):
        cron.validate("61 * * * *")
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        cron.zone("Mars/Olympus")


def test_due_walks_back_from_now_so_a_long_outage_costs_nothing() -> None:
    """A year without workers, every minute: the latest tick in a few steps."""
    after = T0 - dt.timedelta(days=365)
    found, more = cron.due("* * * * *", "UTC", after=after, now=T0, limit=1)
    assert found == [T0.replace(second=0)] and more is True
    found, more = cron.due("0 * * * *", "UTC", after=T0 - 3 * HOUR, now=T0, limit=10)
    assert found == [T0.replace(minute=0, second=0) - HOUR * i for i in (2, 1, 0)]
    assert more is False


# --- settings -------------------------------------------------------------------


def test_settings_schedules_are_validated_naming_the_schedule() -> None:
    conf = parse(
        {
            "SCHEDULES": {
                "nightly-digest": {
                    "cron": "0 3 * * *",
                    "kind": "test.echo",
                    "payload": {"scope": "all"},
                    "priority": "maintenance",
                    "timezone": "Europe/Paris",
                    "tenant": "acme",
                }
            }
        }
    )
    (spec,) = conf.SCHEDULES
    assert (spec.name, spec.cron, spec.priority, spec.timezone) == (
        "nightly-digest",
        "0 3 * * *",
        20,
        "Europe/Paris",
    )
    assert spec.payload == {"scope": "all"} and spec.catch_up == "latest"
    cases = [
        ({"x": {"kind": "k"}}, "RUNQUEUE['SCHEDULES']['x']: 'cron' is required"),
        ({"x": {"cron": "0 3 * *", "kind": "k"}}, "has 4 fields"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "timezone": "Paris"}}, "unknown time zone"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "catch_up": "some"}}, "catch_up 'some'"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "every": 1}}, "unknown key(s) 'every'"),
        ({"x y": {"cron": "0 3 * * *", "kind": "k"}}, "schedule name 'x y' must be"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "priority": "urgent"}}, "priority 'urgent'"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "payload": {1j}}}, "JSON-serialisable"),
        # What submit would refuse at every tick is refused here (its rules).
        ({"x": {"cron": "0 3 * * *", "kind": "k", "tenant": ""}}, "tenant must not be empty"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "max_attempts": 0}}, "max_attempts must be"),
        ({"x": {"cron": "0 3 * * *", "kind": "k", "payload": {"a": "\x00"}}}, "payload"),
        ({"x": {"cron": "0 3 * * *", "kind": "k" * 300}}, "kind must be at most"),
    ]
    for raw, message in cases:
        with pytest.raises(ImproperlyConfigured) as exc:
            parse({"SCHEDULES": raw})
        assert message in str(exc.value)
    # Under the settings beside it: the payload limit of the same RUNQUEUE.
    big = {"x": {"cron": "0 3 * * *", "kind": "k", "payload": {"a": "x" * 100}}}
    with pytest.raises(ImproperlyConfigured, match="over the 64-byte limit"):
        parse({"MAX_PAYLOAD_BYTES": 64, "SCHEDULES": big})
    assert parse({"SCHEDULES": big}).SCHEDULES[0].payload == {"a": "x" * 100}


def test_settings_schedules_are_synced_retired_and_win_a_clash(settings, caplog) -> None:
    admin_made = make("digest", "0 9 * * *")
    settings.RUNQUEUE = {
        "SCHEDULES": {
            "digest": {"cron": "0 3 * * *", "kind": "test.echo", "timezone": "Europe/Paris"},
            "hourly-sync": {"cron": "0 * * * *", "kind": "test.echo"},
        }
    }
    with caplog.at_level(logging.WARNING, logger="runqueue.schedules"):
        schedules.sync_settings()
    digest = Schedule.objects.get(name="digest")
    assert digest.pk == admin_made.pk and digest.source == "settings"
    assert (digest.cron, digest.timezone) == ("0 3 * * *", "Europe/Paris")
    assert "Schedule digest is defined in settings: settings take it over" in caplog.text
    hourly = Schedule.objects.get(name="hourly-sync")
    assert hourly.source == "settings" and hourly.next_fire_at > hourly.handled_until

    settings.RUNQUEUE = {"SCHEDULES": {"digest": {"cron": "0 4 * * *", "kind": "test.echo"}}}
    schedules.sync_settings()
    hourly.refresh_from_db()
    assert hourly.retired_at is not None
    assert Schedule.objects.get(name="digest").cron == "0 4 * * *"
    assert list(
        Schedule.objects.due(T0 + dt.timedelta(days=999)).values_list("name", flat=True)
    ) == ["digest"]

    settings.RUNQUEUE = {
        "SCHEDULES": {
            "digest": {"cron": "0 4 * * *", "kind": "test.echo"},
            "hourly-sync": {"cron": "0 * * * *", "kind": "test.echo"},
        }
    }
    schedules.sync_settings()
    hourly.refresh_from_db()
    assert hourly.retired_at is None
    with pytest.raises(schedules.ScheduleError, match="defined in settings"):
        make("hourly-sync")


# --- firing and catch-up, on the test's clock -------------------------------------


def test_a_tick_fires_once_and_its_run_carries_the_schedule_name() -> None:
    schedule = make(payload={"report": "sales"}, priority=20, tenant="acme")
    assert schedule.next_fire_at == dt.datetime(2026, 5, 4, 13, tzinfo=UTC)
    assert schedules.tick(now=T0 + dt.timedelta(minutes=59)) == []
    (fired,) = schedules.tick(now=dt.datetime(2026, 5, 4, 13, 0, 2, tzinfo=UTC))
    assert schedules.tick(now=dt.datetime(2026, 5, 4, 13, 0, 4, tzinfo=UTC)) == []
    run = Run.objects.get()
    assert fired.run_id == run.id and fired.tick_at == dt.datetime(2026, 5, 4, 13, tzinfo=UTC)
    assert (run.kind, run.payload, run.priority, run.tenant) == (
        "test.echo",
        {"report": "sales"},
        20,
        "acme",
    )
    assert run.principal == "schedule:hourly"
    event = EventLog.objects.get(run=run, type="schedule.fired")
    assert event.data == {"schedule": "hourly", "tick_at": "2026-05-04T13:00:00+00:00"}
    schedule.refresh_from_db()
    assert schedule.next_fire_at == dt.datetime(2026, 5, 4, 14, tzinfo=UTC)


def test_catch_up_latest_fires_the_most_recent_missed_tick_and_records_the_rest() -> None:
    schedule = make()
    schedules.tick(now=T0 + 5 * HOUR)  # workers were down from 12:00:30 to 17:00:30
    assert ticks_fired(schedule) == [dt.datetime(2026, 5, 4, 17, tzinfo=UTC)]
    assert skipped(schedule) == [
        (dt.datetime(2026, 5, 4, 13, tzinfo=UTC), dt.datetime(2026, 5, 4, 17, tzinfo=UTC))
    ]
    assert Run.objects.count() == 1


def test_catch_up_all_fires_every_missed_tick_up_to_its_limit() -> None:
    few = make("few", catch_up="all", catch_up_limit=10)
    many = make("many", catch_up="all", catch_up_limit=3)
    schedules.tick(now=T0 + 5 * HOUR)
    hours = [dt.datetime(2026, 5, 4, h, tzinfo=UTC) for h in (13, 14, 15, 16, 17)]
    assert ticks_fired(few) == hours and skipped(few) == []
    assert ticks_fired(many) == hours[2:]
    assert skipped(many) == [(hours[0], hours[2])]
    assert Run.objects.filter(principal="schedule:few").count() == 5
    assert Run.objects.filter(principal="schedule:many").count() == 3


def test_catch_up_none_fires_only_a_tick_on_time() -> None:
    late = make("late", catch_up="none")
    schedules.tick(now=T0 + 5 * HOUR)  # 17:00:30: thirty seconds after 17:00 is on time
    assert ticks_fired(late) == [dt.datetime(2026, 5, 4, 17, tzinfo=UTC)]
    schedules.tick(now=dt.datetime(2026, 5, 4, 18, 5, tzinfo=UTC))  # five minutes late
    assert ticks_fired(late) == [dt.datetime(2026, 5, 4, 17, tzinfo=UTC)]
    assert skipped(late)[-1] == (
        dt.datetime(2026, 5, 4, 18, tzinfo=UTC),
        dt.datetime(2026, 5, 4, 19, tzinfo=UTC),
    )
    assert schedules.ON_TIME_SECONDS == 60


def test_a_cursor_moved_back_never_fires_a_tick_twice() -> None:
    """The unique (schedule, tick_at) is the last word, whatever the cursor says."""
    schedule = make(catch_up="all")
    schedules.tick(now=T0 + 3 * HOUR)
    assert Run.objects.count() == 3
    Schedule.objects.filter(pk=schedule.pk).update(handled_until=T0, next_fire_at=T0)
    schedules.tick(now=T0 + 4 * HOUR)
    assert Run.objects.count() == 4  # only 16:00 is new
    with pytest.raises(IntegrityError), transaction.atomic():
        ScheduleTick.objects.create(
            schedule=schedule, tick_at=ticks_fired(schedule)[0], outcome="fired"
        )


def _tick_every(start: dt.datetime, end: dt.datetime, step: dt.timedelta) -> None:
    now = start
    while now <= end:
        schedules.tick(now=now)
        now += step


def test_dst_in_paris_a_daily_tick_fires_once_on_both_changes() -> None:
    """At 02:30 in Paris: on 29 March 02:30 does not exist (it fires at 03:00
    CEST, as Debian's cron does); on 25 October it happens twice (it fires
    once). Ticked every ten minutes of the test's clock."""
    spring = make(
        "spring",
        "30 2 * * *",
        at=dt.datetime(2026, 3, 27, 12, tzinfo=UTC),
        timezone="Europe/Paris",
    )
    _tick_every(
        dt.datetime(2026, 3, 27, 12, 5, tzinfo=UTC),
        dt.datetime(2026, 3, 30, 12, tzinfo=UTC),
        dt.timedelta(minutes=10),
    )
    assert ticks_fired(spring) == [
        dt.datetime(2026, 3, 28, 1, 30, tzinfo=UTC),  # 02:30 CET
        dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST, right after the jump
        dt.datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
    ]
    assert skipped(spring) == []
    schedules.pause(spring.pk, actor="test", reason="done with spring")
    autumn = make(
        "autumn",
        "30 2 * * *",
        at=dt.datetime(2026, 10, 23, 12, tzinfo=UTC),
        timezone="Europe/Paris",
    )
    _tick_every(
        dt.datetime(2026, 10, 23, 12, 5, tzinfo=UTC),
        dt.datetime(2026, 10, 26, 12, tzinfo=UTC),
        dt.timedelta(minutes=10),
    )
    assert ticks_fired(autumn) == [
        dt.datetime(2026, 10, 24, 0, 30, tzinfo=UTC),  # 02:30 CEST
        dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 02:30 CEST, not again at 02:30 CET
        dt.datetime(2026, 10, 26, 1, 30, tzinfo=UTC),  # 02:30 CET
    ]
    assert skipped(autumn) == []


def test_dst_in_paris_an_hourly_tick_follows_real_hours() -> None:
    """Every hour on the hour: 23 ticks on the short day, 25 on the long one."""
    hourly = make(
        "paris-hourly",
        "0 * * * *",
        at=dt.datetime(2026, 10, 24, 21, 59, tzinfo=UTC),
        timezone="Europe/Paris",
    )
    _tick_every(
        dt.datetime(2026, 10, 24, 22, 0, 5, tzinfo=UTC),
        dt.datetime(2026, 10, 25, 22, 40, 5, tzinfo=UTC),
        dt.timedelta(minutes=20),
    )
    fired = ticks_fired(hourly)
    assert len(fired) == 25  # local midnight to midnight on 25 October
    assert len(set(fired)) == 25 and skipped(hourly) == []


# --- pause, resume, run now ---------------------------------------------------------


def test_a_paused_schedule_does_not_fire_and_resumes_without_catching_up() -> None:
    schedule = make()
    schedules.pause(schedule.pk, actor="staff:ann", reason="provider outage")
    assert schedules.tick(now=T0 + 3 * HOUR) == []
    with pytest.raises(schedules.ScheduleError, match="'hourly' is already paused"):
        schedules.pause(schedule.pk, actor="staff:ann", reason="again")
    schedules.resume(schedule.pk, actor="staff:bob")
    # Resumed on the database clock (today): the test clock's ticks before are not fired.
    assert schedules.tick(now=T0 + 3 * HOUR) == []
    types = list(QueueEvent.objects.order_by("id").values_list("type", "subject", "data__actor"))
    assert types == [
        ("schedule.paused", "hourly", "staff:ann"),
        ("schedule.resumed", "hourly", "staff:bob"),
    ]
    assert Run.objects.count() == 0


def test_run_now_is_a_normal_submit_and_a_repeated_request_is_one_run() -> None:
    schedule = make(payload={"x": 1})
    first = schedules.run_now(schedule.pk, actor="staff:ann", idempotency_key="click-1")
    again = schedules.run_now(schedule.pk, actor="staff:ann", idempotency_key="click-1")
    assert first.outcome == "created" and again.outcome == "replayed"
    assert again.run.id == first.run.id and Run.objects.count() == 1
    assert first.run.principal == "schedule:hourly" and first.run.payload == {"x": 1}
    event = EventLog.objects.get(run=first.run, type="schedule.fired")
    assert event.data == {"schedule": "hourly", "run_now": True, "actor": "staff:ann"}
    assert QueueEvent.objects.get(type="schedule.run_now").data["run"] == str(first.run.id)


def test_a_tick_that_cannot_submit_writes_nothing_and_stays_due(caplog) -> None:
    schedule = make(kind="no.such.kind")
    with caplog.at_level(logging.ERROR, logger="runqueue.schedules"):
        assert schedules.tick(now=T0 + HOUR) == []
    assert "was not fired" in caplog.text and "no.such.kind" in caplog.text
    assert ScheduleTick.objects.count() == 0 and Run.objects.count() == 0
    schedule.refresh_from_db()
    assert schedule.next_fire_at == dt.datetime(2026, 5, 4, 13, tzinfo=UTC)


def test_a_settings_schedule_of_an_unknown_kind_is_a_check_warning(settings) -> None:
    from runqueue.checks import check_schedules

    settings.RUNQUEUE = {"SCHEDULES": {"x": {"cron": "0 3 * * *", "kind": "no.such.kind"}}}
    (warning,) = check_schedules()
    assert warning.id == "runqueue.W020"
    assert warning.msg == (
        "RUNQUEUE['SCHEDULES']['x'] submits kind 'no.such.kind', "
        "which no handler is registered for."
    )
    settings.RUNQUEUE = {"SCHEDULES": {"x": {"cron": "0 3 * * *", "kind": "test.echo"}}}
    assert check_schedules() == []


def test_the_demo_defines_its_schedule() -> None:
    from io import StringIO

    from django.core.management import call_command

    for _ in range(2):  # idempotent
        call_command("runqueue_demo", "--runs", "2", "--seed", "1", stdout=StringIO())
    schedule = Schedule.objects.get(name="demo-digest")
    assert (schedule.cron, schedule.timezone, schedule.kind) == (
        "*/5 * * * *",
        "Europe/Paris",
        "demo.digest",
    )


# --- overlap ----------------------------------------------------------------------


def _finish(run_id) -> None:
    from runqueue import leases

    lease = leases.claim_one("w-overlap")
    assert lease is not None and lease.run_id == run_id
    testing.succeed(lease, {"ok": True})


def test_overlap_skip_is_the_default_and_records_the_skipped_tick() -> None:
    """Issue 26: a schedule fired again while its last run was still running."""
    schedule = make(overlap="skip")
    assert Schedule._meta.get_field("overlap").default == "skip"
    [first] = schedules.tick(T0 + HOUR)
    assert schedules.tick(T0 + 2 * HOUR) == []  # the first run is still queued
    overlapped = schedule.ticks.get(outcome="overlapped")
    assert overlapped.tick_at == (T0 + 2 * HOUR).replace(minute=0, second=0)
    assert overlapped.run is None
    assert Run.objects.count() == 1
    _finish(first.run_id)
    [third] = schedules.tick(T0 + 3 * HOUR)
    assert third.run_id != first.run_id and Run.objects.count() == 2


def test_overlap_allow_fires_beside_the_active_run() -> None:
    make(overlap="allow")
    schedules.tick(T0 + HOUR)
    schedules.tick(T0 + 2 * HOUR)
    assert Run.objects.filter(status="queued").count() == 2


def test_overlap_cancel_previous_fires_and_cancels_the_earlier_run(
    django_capture_on_commit_callbacks,
) -> None:
    make(overlap="cancel_previous")
    [first] = schedules.tick(T0 + HOUR)
    with django_capture_on_commit_callbacks(execute=True):
        [second] = schedules.tick(T0 + 2 * HOUR)
    assert Run.objects.get(id=first.run_id).status == "cancelled"
    assert Run.objects.get(id=second.run_id).status == "queued"
    cancelled = EventLog.objects.get(run_id=first.run_id, type="run.cancelled")
    assert cancelled.data["actor"] == "schedule:hourly"
    assert "replaced by its tick" in cancelled.data["reason"]


def test_overlap_is_validated_in_settings() -> None:
    with pytest.raises(ImproperlyConfigured, match="overlap 'sometimes' must be one of skip"):
        parse({"SCHEDULES": {"s": {"cron": "* * * * *", "kind": "k", "overlap": "sometimes"}}})
    conf = parse({"SCHEDULES": {"s": {"cron": "* * * * *", "kind": "k"}}})
    assert conf.SCHEDULES[0].overlap == "skip"
