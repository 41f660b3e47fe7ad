"""The settings of issue 12 are validated like the others (runqueue.E002,
naming the key) and checked against the rest of the project: caps need READ
COMMITTED (runqueue.E003), API_KINDS should name handled kinds (W003)."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from runqueue import checks
from runqueue.conf import parse
from runqueue.models import PriorityClass


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"CONCURRENCY": [1, 2]}, "RUNQUEUE['CONCURRENCY'] must be a dict from class name"),
        ({"CONCURRENCY": {"urgent": 1}}, "RUNQUEUE['CONCURRENCY'] has unknown class(es) 'urgent'"),
        ({"CONCURRENCY": {"async": -1}}, "RUNQUEUE['CONCURRENCY']['async'] must be None"),
        ({"CONCURRENCY": {"async": 1.5}}, "RUNQUEUE['CONCURRENCY']['async'] must be None"),
        ({"CONCURRENCY": {"async": True}}, "RUNQUEUE['CONCURRENCY']['async'] must be None"),
        ({"API_KINDS": "demo.research"}, "RUNQUEUE['API_KINDS'] must be a list of strings"),
        ({"API_KINDS": ["runqueue.prune"]}, "RUNQUEUE['API_KINDS'] lists reserved kind(s)"),
        ({"API_KINDS": ["django.tasks"]}, "RUNQUEUE['API_KINDS'] lists reserved kind(s)"),
        (
            {"API_SESSION_MAX_PRIORITY_CLASS": "urgent"},
            "RUNQUEUE['API_SESSION_MAX_PRIORITY_CLASS'] must be one of interactive, async",
        ),
    ],
)
def test_bad_values_get_a_clear_message(raw: dict, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        parse(raw)
    with override_settings(RUNQUEUE=raw):
        [error] = checks.check_settings()
    assert error.id == "runqueue.E002" and message in error.msg


def test_good_values_parse() -> None:
    conf = parse(
        {
            "CONCURRENCY": {"interactive": 2, "maintenance": 0, "async": None},
            "API_KINDS": ["demo.research"],
            "API_SESSION_MAX_PRIORITY_CLASS": "maintenance",
        }
    )
    assert dict(conf.CONCURRENCY) == {
        PriorityClass.INTERACTIVE: 2,
        PriorityClass.ASYNC: None,
        PriorityClass.MAINTENANCE: 0,
    }
    assert conf.caps_configured
    assert conf.API_KINDS == ("demo.research",)
    assert conf.API_SESSION_MAX_PRIORITY_CLASS == 2
    assert not parse({}).caps_configured and parse({}).API_KINDS == ()


def test_caps_are_held_per_class_and_a_class_left_out_has_none() -> None:
    """Caps are keyed by the class itself, not by a position in a tuple of
    three: every class of ``PriorityClass`` has one, in class order for the
    claim's parameter."""
    from runqueue.capacity import concurrency

    conf = parse({"CONCURRENCY": {"async": 1}})
    assert [conf.default_cap(member) for member in PriorityClass] == [
        None if member != PriorityClass.ASYNC else 1 for member in PriorityClass
    ]
    assert parse({}).default_cap(PriorityClass.MAINTENANCE) is None
    with override_settings(RUNQUEUE={"CONCURRENCY": {"maintenance": 0}}):
        assert concurrency.claim_params() == {"default_caps": [None, None, 0]}


def test_caps_at_another_isolation_level_are_an_error(settings, monkeypatch) -> None:
    from psycopg import IsolationLevel

    settings.RUNQUEUE = {"CONCURRENCY": {"async": 2}}
    assert checks.check_concurrency_and_api_kinds() == []
    monkeypatch.setattr(checks, "default_isolation_level", lambda: IsolationLevel.SERIALIZABLE)
    [error] = checks.check_concurrency_and_api_kinds()
    assert error.id == "runqueue.E003" and "READ COMMITTED" in error.msg
    settings.RUNQUEUE = {}
    assert checks.check_concurrency_and_api_kinds() == []


def test_an_api_kind_without_a_handler_is_a_warning(settings) -> None:
    settings.RUNQUEUE = {"API_KINDS": ["test.echo", "nobody.handles.this"]}
    [warning] = checks.check_concurrency_and_api_kinds()
    assert warning.id == "runqueue.W003" and "nobody.handles.this" in warning.msg
    assert "test.echo" not in warning.msg
