"""Values PostgreSQL cannot store, or Python cannot convert, are refused
before anything is written: times at the edges of the ranges, strings with
lone surrogates or NULs, in every text field of submit() and of the API."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import runqueue
from runqueue.errors import InvalidSubmission, UnknownKind
from runqueue.models import EventLog, IdempotencyKey, Run
from tests.api_helpers import RUNS, ApiCaller, make_caller, problem, submit

pytestmark = pytest.mark.django_db

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

#: Python allows UTC offsets up to +-23:59; PostgreSQL allows up to +-15:59.
FAR_OFFSETS = [dt.timedelta(hours=h, minutes=m) for h, m in ((23, 59), (15, 59), (16, 0))]
OFFSETS = st.sampled_from([dt.UTC]) | st.builds(
    dt.timezone,
    st.sampled_from([d * sign for d in FAR_OFFSETS for sign in (1, -1)])
    | st.timedeltas(
        min_value=dt.timedelta(hours=-23, minutes=-59),
        max_value=dt.timedelta(hours=23, minutes=59),
    ),
)
#: Times at the edges of Python's range (year 1, year 9999): an offset moves
#: them outside it once in UTC. PostgreSQL's range (4713 BC - 294276 AD) is
#: wider, so its edges are reachable only as strings (below).
EDGE_TIMES = st.builds(
    lambda naive, tz: naive.replace(tzinfo=tz),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(1, 1, 2))  # noqa: DTZ001
    | st.datetimes(
        min_value=dt.datetime(9999, 12, 30),  # noqa: DTZ001
        max_value=dt.datetime.max,  # noqa: DTZ901
    ),
    OFFSETS,
)
EDGE_TIME_STRINGS = EDGE_TIMES.map(dt.datetime.isoformat) | st.sampled_from(
    [
        "9999-12-31T23:59:59-23:59",
        "0001-01-01T00:00:00+23:59",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999Z",
        "10000-01-01T00:00:00Z",
        "0000-12-31T00:00:00Z",
        "294276-12-31T23:59:59Z",
        "4714-11-24T00:00:00Z BC",
        "infinity",
        "-infinity",
        "2030-01-01T09:00:00+24:00",
    ]
)
#: Characters PostgreSQL refuses (NUL, unpaired surrogates) mixed with ones it takes.
BAD_CHARS = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]
EDGE_TEXT = st.text(
    alphabet=st.characters() | st.sampled_from(BAD_CHARS), min_size=1, max_size=12
) | st.sampled_from(["\udc00\ud800", "a\ud83d", "\ud83d\ude00", "\U0001f600", "\\u0000"])
JSON_WITH_EDGE_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers() | EDGE_TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(EDGE_TEXT, children),
    max_leaves=8,
)


def counts() -> tuple[int, int, int]:
    return Run.objects.count(), EventLog.objects.count(), IdempotencyKey.objects.count()


# -- the two reported 500s, through submit() ------------------------------------


@pytest.mark.parametrize("offset", [dt.timedelta(hours=-23, minutes=-59), dt.timedelta(hours=-1)])
def test_submit_refuses_a_time_past_year_9999_in_utc(offset) -> None:
    when = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone(offset))
    with pytest.raises(InvalidSubmission) as excinfo:
        runqueue.submit(kind="test.echo", scheduled_for=when)
    assert excinfo.value.field == "scheduled_for"
    assert "UTC" in str(excinfo.value)
    assert counts() == (0, 0, 0)


def test_submit_refuses_a_time_before_year_1_in_utc() -> None:
    when = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    with pytest.raises(InvalidSubmission) as excinfo:
        runqueue.submit(kind="test.echo", scheduled_for=when)
    assert excinfo.value.field == "scheduled_for"


def test_the_last_microsecond_python_holds_is_stored() -> None:
    when = dt.datetime.max.replace(tzinfo=dt.UTC)
    run = runqueue.submit(kind="test.echo", scheduled_for=when).run
    assert Run.objects.get(id=run.id).scheduled_for == when


@pytest.mark.parametrize("field", ["kind", "session_id", "tenant", "principal", "idempotency_key"])
@pytest.mark.parametrize("bad", ["\ud800", "a\udfffb", "x\x00"])
def test_submit_refuses_unstorable_text_in_every_field(field, bad) -> None:
    args = {"kind": "test.echo", field: bad}
    with pytest.raises(InvalidSubmission) as excinfo:
        runqueue.submit(**args)
    assert excinfo.value.field == field
    assert counts() == (0, 0, 0)


@pytest.mark.parametrize(
    "payload",
    [
        {"s": "\ud800"},
        {"\udfff": 1},
        ["ok", {"deep": ["\ud83d"]}],
        "\x00",
        {"k\x00": "v"},
    ],
)
def test_submit_refuses_unstorable_text_in_the_payload(payload) -> None:
    with pytest.raises(InvalidSubmission) as excinfo:
        runqueue.submit(kind="test.echo", payload=payload, idempotency_key="k-1")
    assert excinfo.value.field == "payload"
    assert counts() == (0, 0, 0)


def test_a_literal_backslash_u0000_in_a_payload_is_text_not_a_nul() -> None:
    run = runqueue.submit(kind="test.echo", payload={"s": "\\u0000", "emoji": "\U0001f600"}).run
    assert Run.objects.get(id=run.id).payload == {"s": "\\u0000", "emoji": "\U0001f600"}


# -- the same through the HTTP API -------------------------------------------------


@pytest.fixture
def caller() -> ApiCaller:
    return make_caller("edge", "acme")


def test_api_refuses_a_time_past_year_9999_in_utc(client, caller) -> None:
    response = submit(
        client,
        caller,
        {"kind": "test.echo", "scheduled_for": "9999-12-31T23:59:59-23:59"},
    )
    body = problem(response, 422, "validation-failed")
    assert [e["pointer"] for e in body["errors"]] == ["/scheduled_for"]
    assert counts() == (0, 0, 0)


def test_api_refuses_a_lone_surrogate_in_the_payload(client, caller) -> None:
    response = submit(
        client, caller, None, raw_body='{"kind": "test.echo", "payload": {"s": "\\ud800"}}'
    )
    body = problem(response, 422, "validation-failed")
    assert [e["pointer"] for e in body["errors"]] == ["/payload"]
    assert counts() == (0, 0, 0)


@pytest.mark.parametrize("field", ["kind", "session_id"])
def test_api_refuses_a_lone_surrogate_in_text_fields(client, caller, field) -> None:
    body = {"kind": "test.echo", field: "s-\udc00"}
    response = submit(client, caller, body)
    errors = problem(response, 422, "validation-failed")["errors"]
    assert [e["pointer"] for e in errors] == [f"/{field}"]
    assert counts() == (0, 0, 0)


def test_api_refuses_a_lone_surrogate_in_a_cancel_reason(client, caller) -> None:
    run = submit(client, caller, {"kind": "test.echo"}).json()
    before = counts()
    response = client.post(
        f"{RUNS}{run['id']}/cancel/",
        data='{"reason": "\\ud800"}',
        content_type="application/json",
        headers=caller.headers(),
    )
    body = problem(response, 422, "validation-failed")
    assert [e["pointer"] for e in body["errors"]] == ["/reason"]
    assert counts() == before
    assert Run.objects.get(id=run["id"]).status == "queued"


# -- generated: every text field and the time, through both ------------------------


@SETTINGS
@given(
    scheduled_for=st.none() | EDGE_TIMES,
    kind=st.just("test.echo") | EDGE_TEXT,
    session_id=st.none() | EDGE_TEXT,
    tenant=st.just("default") | EDGE_TEXT,
    principal=st.just("") | EDGE_TEXT,
    key=st.none() | st.just("k") | EDGE_TEXT,
    payload=JSON_WITH_EDGE_TEXT,
)
@example(
    scheduled_for=dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone(-FAR_OFFSETS[0])),
    kind="test.echo",
    session_id=None,
    tenant="default",
    principal="",
    key=None,
    payload={"s": "\ud800"},
)
def test_submit_stores_or_refuses_edge_values(
    scheduled_for, kind, session_id, tenant, principal, key, payload
) -> None:
    before = counts()
    try:
        sub = runqueue.submit(
            kind=kind,
            payload=payload,
            session_id=session_id,
            tenant=tenant,
            principal=principal,
            idempotency_key=key,
            scheduled_for=scheduled_for,
        )
    except InvalidSubmission as exc:
        assert str(exc).startswith(f"{exc.field}: ")
        assert counts() == before
        return
    except (UnknownKind, runqueue.ActiveRunConflict, runqueue.IdempotencyConflict):
        assert counts() == before
        return
    stored = Run.objects.get(id=sub.run.id)
    if sub.outcome == "created":
        assert stored.payload == ({} if payload is None else json.loads(json.dumps(payload)))
        assert (stored.session_id, stored.tenant, stored.principal) == (
            session_id,
            tenant,
            principal,
        )
        assert stored.scheduled_for == scheduled_for


@SETTINGS
@given(
    scheduled_for=st.none() | EDGE_TIME_STRINGS,
    kind=st.just("test.echo") | EDGE_TEXT,
    session_id=st.none() | EDGE_TEXT,
    payload=JSON_WITH_EDGE_TEXT,
    reason=EDGE_TEXT,
)
def test_api_answers_4xx_or_stores_edge_values(
    client, caller, scheduled_for, kind, session_id, payload, reason
) -> None:
    before = counts()
    body = {"kind": kind, "payload": payload, "session_id": session_id}
    if scheduled_for is not None:
        body["scheduled_for"] = scheduled_for
    response = submit(client, caller, body, key=str(uuid.uuid4()))
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        problem(
            response, response.status_code, json.loads(response.content)["type"].rsplit(":", 1)[-1]
        )
        assert counts() == before
        return
    run = response.json()
    cancel = client.post(
        f"{RUNS}{run['id']}/cancel/",
        data=json.dumps({"reason": reason}),
        content_type="application/json",
        headers=caller.headers(),
    )
    assert cancel.status_code in (200, 422), cancel.content
    if cancel.status_code == 422:
        assert Run.objects.get(id=run["id"]).status == "queued"
