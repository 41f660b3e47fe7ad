"""One validator for a submission: every problem with its JSON Pointer,
limits read from the model, the same constants in the OpenAPI document,
and one JSON check for every jsonb write."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest

import runqueue
from runqueue.api.openapi import document
from runqueue.models import PRIORITY_MAX, IdempotencyKey, PriorityClass, Run
from runqueue.submission.rules import (
    KEY_MAX_LENGTH,
    KEY_PATTERN,
    TEXT_LIMITS,
    check_submission,
    is_idempotency_key,
)
from runqueue.validation import json_problem, json_text


def test_every_problem_is_returned_with_its_pointer_in_member_order() -> None:
    checked, problems = check_submission(
        kind="",
        tenant=5,
        session_id="x" * 300,
        idempotency_key="has space",
        priority=PRIORITY_MAX + 1,
        max_attempts=0,
        scheduled_for=dt.datetime(2030, 1, 1),  # noqa: DTZ001
        payload={"a": "nul\x00"},
    )
    assert checked is None
    assert [p.pointer for p in problems] == [
        "/kind",
        "/tenant",
        "/session_id",
        "/idempotency_key",
        "/priority",
        "/max_attempts",
        "/scheduled_for",
        "/payload",
    ]
    assert problems[0].detail == "must not be empty"
    assert problems[2].detail == "must be at most 255 characters, got 300"
    assert problems[-1].detail == "must not contain NUL characters, at '/a'"


def test_the_first_problem_is_what_submit_raises() -> None:
    _, problems = check_submission(kind="no.such.handler", priority=-1)
    assert [p.pointer for p in problems] == ["/kind", "/priority"]
    assert isinstance(problems[0].error(), runqueue.UnknownKind)
    error = problems[1].error()
    assert isinstance(error, runqueue.InvalidSubmission)
    assert str(error) == f"priority: must be between 0 and {PRIORITY_MAX}, got -1"


def test_a_checked_submission_has_its_defaults_filled_in() -> None:
    checked, problems = check_submission(
        kind="test.echo",
        payload=(1, "a"),
        scheduled_for=dt.datetime(2030, 1, 1, 9, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    )
    assert problems == [] and checked is not None
    assert checked.payload == [1, "a"] and checked.payload_text == '[1, "a"]'
    assert checked.scheduled_for == dt.datetime(2030, 1, 1, 7, tzinfo=dt.UTC)
    assert (checked.tenant, checked.concurrency_key, checked.max_attempts) == (
        "default",
        "default",
        3,
    )


def test_json_forms_take_class_names_and_rfc_3339_times() -> None:
    checked, problems = check_submission(
        kind="test.echo",
        priority="maintenance",
        scheduled_for="2030-01-01T09:00:00+02:00",
        from_json=True,
    )
    assert problems == [] and checked is not None
    assert checked.priority == PriorityClass.MAINTENANCE
    assert checked.scheduled_for == dt.datetime(2030, 1, 1, 7, tzinfo=dt.UTC)
    _, problems = check_submission(kind="test.echo", priority="maintenance")
    assert problems[0].detail == "must be an integer, got 'maintenance'"


def test_limits_are_the_model_fields() -> None:
    for name, limit in TEXT_LIMITS.items():
        assert limit == Run._meta.get_field(name).max_length
    assert KEY_MAX_LENGTH == IdempotencyKey._meta.get_field("key").max_length
    assert check_submission(kind="test.echo", priority=PRIORITY_MAX)[1] == []
    assert check_submission(kind="test.echo", session_id="s" * TEXT_LIMITS["session_id"])[1] == []
    assert is_idempotency_key("k" * KEY_MAX_LENGTH)
    assert not is_idempotency_key("k" * (KEY_MAX_LENGTH + 1))


def test_a_key_is_the_whole_value() -> None:
    # "$" would match before a trailing newline; the rule is the whole value.
    assert not is_idempotency_key("key\n")
    assert check_submission(kind="test.echo", idempotency_key="key\n")[1][0].field == (
        "idempotency_key"
    )


def test_the_openapi_document_reads_the_same_constants() -> None:
    doc = document()
    submit = doc["components"]["schemas"]["SubmitRun"]["properties"]
    assert submit["priority"]["oneOf"][0]["maximum"] == PRIORITY_MAX
    assert submit["priority"]["oneOf"][1]["enum"] == list(PriorityClass.slugs())
    assert submit["session_id"]["maxLength"] == TEXT_LIMITS["session_id"]
    (header,) = doc["paths"]["/api/runs/"]["post"]["parameters"]
    assert header["schema"]["pattern"] == KEY_PATTERN


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"s": "\\u0000"}, None),
        ({"s": "a\x00"}, "must not contain NUL characters, at '/s'"),
        (["\ud800"], "must be valid Unicode text"),
        ({"x": float("nan")}, "must be JSON-serialisable"),
        ({"x": object()}, "must be JSON-serialisable"),
    ],
)
def test_one_json_check_for_every_jsonb_write(value: object, problem: str | None) -> None:
    text, found = json_problem(value)
    if problem is None:
        assert found is None and json_text(value, "result") == text
        return
    assert found is not None and found.startswith(problem)
    with pytest.raises(ValueError, match=f"^result {problem}"):
        json_text(value, "result")


def test_runqueue_submit_is_the_function_whatever_is_imported() -> None:
    module = importlib.import_module("runqueue.submission.submit")
    assert runqueue.submit is module.submit
    assert runqueue.submission.submit is module
