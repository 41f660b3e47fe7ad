"""A submit's fields are declared once (runqueue.submission.fields): every
place that spells them out holds to the table, and the idempotency hash of
a request is the one keys stored before the table hold."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from decimal import Decimal
from typing import get_type_hints

from runqueue.api import parsing
from runqueue.submission import fields as submission_fields
from runqueue.submission.keys import request_hash_of as _hash
from runqueue.submission.rules import CheckedSubmission, check_submission
from runqueue.submission.submit import SubmitRequest, submit, submit_in_transaction

NAMES = list(submission_fields.NAMES)


def _keywords(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()]


def test_the_python_signatures_are_the_tables() -> None:
    assert _keywords(submit) == NAMES
    assert _keywords(submit_in_transaction) == [n for n in NAMES if n != "idempotency_key"]
    assert [f.name for f in dataclasses.fields(SubmitRequest)] == NAMES
    checks = _keywords(check_submission)
    assert checks[: len(NAMES)] == NAMES
    assert checks[len(NAMES) :] == ["from_json", "registered_only", "conf"]
    checked = {f.name for f in dataclasses.fields(CheckedSubmission)}
    assert set(NAMES) <= checked


def test_the_apis_members_are_the_tables() -> None:
    api = [f.name for f in submission_fields.API_FIELDS]
    assert parsing.SUBMIT_FIELDS == set(api)
    assert list(get_type_hints(parsing.SubmitBody)) == api
    assert list(get_type_hints(parsing.SubmitArgs)) == api
    assert list(submission_fields.api_properties(["k"])) == api


def _request(**changes) -> CheckedSubmission:
    base = CheckedSubmission(
        kind="test.echo",
        payload={"b": [1, "é"], "a": None},
        session_id=None,
        tenant="default",
        principal="",
        priority=0,
        scheduled_for=None,
        max_attempts=3,
        idempotency_key="k1",
        concurrency_key="default",
    )
    return dataclasses.replace(base, **changes)


def test_the_hash_is_the_one_stored_keys_hold() -> None:
    """Hashes taken before the table existed (a key's request hash is
    stored with it: a change here would refuse every retry as a conflict)."""
    assert _hash(_request()) == "db9de2210a855f1af5b30767cf86f800f91fcf42e072727f6f3463ed569f82a8"
    full = _request(
        payload=[1],
        session_id="s",
        tenant="t",
        priority=15,
        scheduled_for=dt.datetime(2030, 1, 2, 1, 4, 5, tzinfo=dt.UTC),
        concurrency_key="ck",
        spend_cap=Decimal("2.500000000000"),  # as check_submission stores it
        idempotency_key="k2",
        on_busy="enqueue",
        start_within=5.0,
    )
    assert _hash(full) == "fc26a92eca1b2eb6b8a0266706d95d2439417dee437f98768191c65ad91c175c"
    more = dataclasses.replace(full, budget=("bk", 100), webhook=(1, "https://hooks.example/x"))
    assert _hash(more) == "6c2c805f264ea3f37079ece30845402c007ec5d45862f1509de6594dae0eefaa"
    # What the hash leaves out: a retry may change it and still replay.
    assert _hash(dataclasses.replace(full, on_busy="merge", start_within=9.0)) == _hash(full)
