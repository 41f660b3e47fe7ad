"""Bad input everywhere a user can send it gets a clear error and leaves no
partial rows behind (hypothesis-driven)."""

from __future__ import annotations

import argparse
import datetime as dt
import string

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runqueue
from runqueue.errors import InvalidSubmission, UnknownKind
from runqueue.management.commands.runworker import heartbeat_for, seconds, slot_spec
from runqueue.models import EventLog, IdempotencyKey, Run

pytestmark = pytest.mark.django_db

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
odd_text = st.text() | st.sampled_from(["", " ", "a" * 256, "k\x00", "é", "key with spaces", "\n"])
anything = st.none() | st.integers() | st.floats() | st.booleans() | odd_text | st.binary()
# Any fixed offset Python allows, including ones PostgreSQL refuses (> 15:59).
offsets = st.builds(
    dt.timezone,
    st.timedeltas(
        min_value=dt.timedelta(hours=-23, minutes=-59),
        max_value=dt.timedelta(hours=23, minutes=59),
    ),
)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _nothing_half_written(before: tuple[int, int, int]) -> None:
    assert (
        Run.objects.count(),
        EventLog.objects.count(),
        IdempotencyKey.objects.count(),
    ) == before


def _counts() -> tuple[int, int, int]:
    return Run.objects.count(), EventLog.objects.count(), IdempotencyKey.objects.count()


@SETTINGS
@given(
    kind=st.sampled_from(["k"]) | odd_text,
    payload=json_values | anything,
    session_id=st.none() | odd_text,
    priority=st.integers(-10, 40000) | anything,
    key=st.none() | odd_text,
    scheduled_for=st.none()
    | st.datetimes(timezones=st.just(dt.UTC))
    | st.datetimes(timezones=offsets)
    | st.datetimes()
    | anything,
    max_attempts=st.none() | st.integers(-2, 5) | anything,
)
def test_submit_accepts_or_refuses_cleanly(
    kind, payload, session_id, priority, key, scheduled_for, max_attempts
) -> None:
    before = _counts()
    try:
        sub = runqueue.submit(
            kind=kind,
            payload=payload,
            session_id=session_id,
            priority=priority,
            idempotency_key=key,
            scheduled_for=scheduled_for,
            max_attempts=max_attempts,
        )
    except InvalidSubmission as exc:
        assert str(exc).startswith(f"{exc.field}: ")
        _nothing_half_written(before)
        return
    except UnknownKind:
        _nothing_half_written(before)
        return
    except runqueue.ActiveRunConflict:
        _nothing_half_written(before)
        return
    except runqueue.IdempotencyConflict:
        _nothing_half_written(before)
        return
    run = Run.objects.get(id=sub.run.id)
    assert run.kind == "k"
    if sub.outcome == "created":
        assert Run.objects.count() == before[0] + 1


def test_huge_payload_is_refused_with_its_size(settings) -> None:
    settings.RUNQUEUE = {"MAX_PAYLOAD_BYTES": 1000}
    with pytest.raises(InvalidSubmission) as excinfo:
        runqueue.submit(kind="k", payload={"blob": "x" * 2000})
    assert str(excinfo.value) == "payload: is 2012 bytes as JSON, over the 1000-byte limit"
    assert not Run.objects.exists()


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=string.printable + "é,=", max_size=40))
def test_slot_spec_option_is_valid_or_says_why(text: str) -> None:
    try:
        spec = slot_spec(text)
    except argparse.ArgumentTypeError as exc:
        assert str(exc)
        return
    assert 1 <= spec.count <= 256 and spec.classes


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=20) | st.floats(allow_nan=True).map(str))
def test_seconds_option_is_valid_or_says_why(text: str) -> None:
    try:
        value = seconds(text)
    except argparse.ArgumentTypeError as exc:
        assert str(exc)
        return
    assert 0 < value <= 86400


@pytest.mark.parametrize(
    "args",
    [["--slots", ""], ["--slots", "interactive=1e9"], ["--grace-seconds", "-3"], ["--burst", "x"]],
)
def test_runworker_refuses_bad_arguments(args: list[str]) -> None:
    with pytest.raises(CommandError):
        call_command("runworker", *args)


def test_a_short_lease_alone_gets_a_heartbeat_that_fits_it() -> None:
    """Issue 32: ``runworker --lease-seconds 5`` refused to start (the 10 s
    default heartbeat). Without ``--heartbeat-seconds`` the heartbeat is at
    most a third of the lease; one given is kept (and refused if too long:
    tests/unit/test_worker_spec.py)."""
    assert heartbeat_for(5, None) == pytest.approx(5 / 3)
    assert heartbeat_for(30, None) == 10
    assert heartbeat_for(5, 1) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reason": "a\x00b"}, "cancel: reason must not contain NUL characters"),
        ({"reason": "\ud800"}, "cancel: reason must be valid Unicode text"),
        ({"reason": "x" * 1001}, "cancel: reason must be at most 1000 characters, got 1001"),
        ({"reason": 5}, "cancel: reason must be a string, got int"),
        ({"actor": "staff\x00"}, "cancel: actor must not contain NUL characters"),
    ],
)
def test_cancel_checks_its_reason_before_writing(kwargs: dict, message: str) -> None:
    """Issue 26: a reason the database cannot store hit a database error."""
    run = runqueue.submit(kind="test.echo").run
    events = EventLog.objects.count()
    with pytest.raises(runqueue.InvalidArgument) as excinfo:
        runqueue.cancel(run.id, **({"reason": "r", "actor": "a"} | kwargs))
    assert str(excinfo.value).startswith(message)
    assert isinstance(excinfo.value, ValueError)
    assert Run.objects.get(id=run.id).status == "queued"
    assert EventLog.objects.count() == events


def test_cancel_and_requeue_check_the_run_id() -> None:
    with pytest.raises(runqueue.InvalidArgument, match="cancel: run_id must be a UUID, got 'abc'"):
        runqueue.cancel("abc", reason="r", actor="a")
    from runqueue import leases

    with pytest.raises(runqueue.InvalidArgument, match="requeue: reason must not contain NUL"):
        leases.requeue(runqueue.submit(kind="test.echo").run.id, actor="a", reason="\x00")


@pytest.mark.parametrize("field", ["start_within", "max_duration"])
@pytest.mark.parametrize("value", [1e-320, 5e-324, 1e-7, 4e-7, dt.timedelta(0)])
def test_a_deadline_that_rounds_to_zero_is_refused(field: str, value: object) -> None:
    """Issue 47 item 6: a deadline under the database's resolution (a
    microsecond) was accepted and rounded to zero: the run expired or
    dead-lettered at once. The docs say zero is refused."""
    with pytest.raises(InvalidSubmission, match=field):
        runqueue.submit(kind="test.echo", **{field: value})
    assert not Run.objects.exists()


def test_a_deadline_of_a_microsecond_is_kept() -> None:
    run = runqueue.submit(kind="test.echo", max_duration=1e-6, start_within=1e-6).run
    assert run.max_duration == 1e-6 and run.start_by is not None


@pytest.mark.parametrize("cap", ["5", "5.0", b"5"])
def test_a_spend_cap_given_as_a_string_is_refused_from_python_as_from_the_api(cap) -> None:
    """Issue 47 item 6: ``spend_cap="5"`` passed from Python while the API
    refused a string: one rule, a number."""
    with pytest.raises(InvalidSubmission, match="spend_cap"):
        runqueue.submit(kind="test.echo", spend_cap=cap)
    assert not Run.objects.exists()


def test_record_usage_refuses_a_cost_given_as_a_string() -> None:
    from decimal import Decimal

    from runqueue.history import usage

    with pytest.raises(ValueError, match="cost must be a number"):
        usage.checked("m", 1, 1, "12.5")
    assert usage.checked("m", 1, 1, Decimal("12.5"))[3] == Decimal("12.5")
    assert usage.checked("m", 1, 1, 12.5)[3] == Decimal("12.5")


@pytest.mark.parametrize("name", ["START_WITHIN_SECONDS", "MAX_DURATION_SECONDS"])
def test_a_deadline_setting_that_rounds_to_zero_is_refused(settings, name: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from runqueue.conf import get_settings

    settings.RUNQUEUE = {**settings.RUNQUEUE, name: 1e-320}
    with pytest.raises(ImproperlyConfigured, match="at least 0.000001 seconds"):
        get_settings()
