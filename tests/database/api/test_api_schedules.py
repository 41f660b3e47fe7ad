"""``/api/schedules/`` with real tokens: create (cron or one-shot, aimed at
a session or not), list, read, pause, resume, delete; the Idempotency-Key
as on a submit; the per-token limit; another tenant's schedules unseen;
bad input refused with nothing written (issue 49 item 3)."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

import runqueue
from runqueue import schedules
from runqueue.db import db_now
from runqueue.models import QueueEvent, Run, RunStatus, Schedule, ScheduleTick
from tests.api_helpers import ApiCaller, make_caller, problem

pytestmark = pytest.mark.django_db

SCHEDULES = "/api/schedules/"
CRON = {
    "kind": "test.echo",
    "payload": {"n": 1},
    "cron": "0 9 * * 1-5",
    "timezone": "Europe/Paris",
}


@pytest.fixture
def alice() -> ApiCaller:
    return make_caller("alice", "acme")


@pytest.fixture
def mallory() -> ApiCaller:
    return make_caller("mallory", "evil")


def create(client, caller: ApiCaller, body: object, key: str | None = None):
    return client.post(
        SCHEDULES,
        data=json.dumps(body),
        content_type="application/json",
        headers=caller.headers(key if key is not None else str(uuid.uuid4())),
    )


def post(client, caller: ApiCaller, url: str, body: object = None):
    data = "" if body is None else json.dumps(body)
    return client.generic(
        "POST", url, data, content_type="application/json", headers=caller.headers()
    )


def in_hours(hours: float) -> str:
    return (db_now() + dt.timedelta(hours=hours)).isoformat()


def test_create_list_read_pause_resume_delete(client, alice) -> None:
    made = create(client, alice, CRON)
    assert made.status_code == 201, made.content
    body = made.json()
    url = body["url"]
    assert made["Location"] == url == f"{SCHEDULES}{body['id']}/"
    assert (body["cron"], body["timezone"], body["run_at"], body["state"]) == (
        "0 9 * * 1-5",
        "Europe/Paris",
        None,
        "active",
    )
    # No priority given: the token's ceiling, as on a submit.
    assert (body["kind"], body["payload"], body["priority"]) == ("test.echo", {"n": 1}, 0)
    assert body["source"] == "api" and body["created_by"] == alice.principal
    assert body["next_fire_at"] is not None and body["last_run"] is None
    row = Schedule.objects.get()
    assert (row.tenant, row.token.user, row.principal) == (
        "acme",
        alice.user,
        f"schedule:{row.name}",
    )

    listed = client.get(SCHEDULES, headers=alice.headers()).json()
    assert [s["id"] for s in listed["schedules"]] == [body["id"]] and listed["next"] is None
    assert client.get(url, headers=alice.headers()).json() == body

    paused = post(client, alice, f"{url}pause/", {"reason": "holiday"})
    assert paused.status_code == 200, paused.content
    assert (paused.json()["state"], paused.json()["pause_reason"]) == ("paused", "holiday")
    assert paused.json()["next_fire_at"] is None
    # Pausing again is a retry: the same answer, nothing recorded twice.
    assert post(client, alice, f"{url}pause/").json()["state"] == "paused"
    assert QueueEvent.objects.filter(type="schedule.paused").count() == 1

    resumed = post(client, alice, f"{url}resume/")
    assert (resumed.status_code, resumed.json()["state"]) == (200, "active")
    assert post(client, alice, f"{url}resume/").status_code == 200

    deleted = client.delete(url, headers=alice.headers())
    assert deleted.status_code == 204
    assert not Schedule.objects.exists()
    problem(client.get(url, headers=alice.headers()), 404, "not-found")
    problem(client.delete(url, headers=alice.headers()), 404, "not-found")
    assert list(QueueEvent.objects.order_by("id").values_list("type", flat=True)) == [
        "schedule.created",
        "schedule.paused",
        "schedule.resumed",
        "schedule.deleted",
    ]


def test_a_one_shot_fires_once_then_is_done(client, alice) -> None:
    body = create(client, alice, {"kind": "test.echo", "run_at": in_hours(2)}).json()
    assert (body["cron"], body["timezone"], body["state"]) == (None, None, "active")
    run_at = dt.datetime.fromisoformat(body["run_at"])
    assert body["next_fire_at"] == body["run_at"]
    assert schedules.tick(now=run_at - dt.timedelta(seconds=1)) == []
    (fired,) = schedules.tick(now=run_at + dt.timedelta(seconds=5))
    assert schedules.tick(now=run_at + dt.timedelta(days=400)) == []
    run = Run.objects.get()
    assert fired.run_id == run.id and fired.tick_at == run_at
    assert (run.tenant, run.principal) == ("acme", f"schedule:api:{body['id']}")
    after = client.get(body["url"], headers=alice.headers()).json()
    assert (after["state"], after["next_fire_at"]) == ("done", None)
    assert after["last_run"] == f"/api/runs/{run.id}/"


def test_a_one_shot_late_or_paused_past_its_time_still_fires_once(client, alice) -> None:
    body = create(client, alice, {"kind": "test.echo", "run_at": in_hours(1)}).json()
    run_at = dt.datetime.fromisoformat(body["run_at"])
    post(client, alice, f"{body['url']}pause/")
    assert schedules.tick(now=run_at + dt.timedelta(hours=3)) == []
    post(client, alice, f"{body['url']}resume/")
    # Resumed after its time: it fires at the next tick, however late.
    (fired,) = schedules.tick(now=run_at + dt.timedelta(hours=5))
    assert fired.tick_at == run_at and Run.objects.count() == 1


def test_a_session_aimed_schedule_is_the_sessions_next_turn(client, alice) -> None:
    active = runqueue.submit(
        kind="test.echo", session_id="chat-1", tenant="acme", principal=alice.principal
    ).run
    body = create(
        client, alice, {"kind": "test.echo", "session_id": "chat-1", "run_at": in_hours(1)}
    ).json()
    # Unsaid, a reminder waits in line: never taken as a waiting run's answer.
    assert (body["session_id"], body["on_busy"]) == ("chat-1", "enqueue")
    schedules.tick(now=dt.datetime.fromisoformat(body["run_at"]) + dt.timedelta(seconds=1))
    reminder = Run.objects.exclude(id=active.id).get()
    assert (reminder.session_id, reminder.status) == ("chat-1", RunStatus.PENDING)
    assert reminder.principal.startswith("schedule:api:")


def test_a_session_aimed_schedule_with_on_busy_reject_skips_a_busy_tick(client, alice) -> None:
    runqueue.submit(kind="test.echo", session_id="chat-2", tenant="acme", principal="p")
    body = {"kind": "test.echo", "session_id": "chat-2", "on_busy": "reject", "cron": "* * * * *"}
    made = create(client, alice, body).json()
    next_fire = dt.datetime.fromisoformat(made["next_fire_at"])
    assert schedules.tick(now=next_fire + dt.timedelta(seconds=1)) == []
    tick = ScheduleTick.objects.get()
    assert (tick.outcome, tick.run_id) == ("busy", None)
    assert Run.objects.count() == 1
    # Handled: the next worker does not try the busy tick again.
    assert schedules.tick(now=next_fire + dt.timedelta(seconds=2)) == []


def test_the_idempotency_key_replays_a_create_and_refuses_another_body(client, alice) -> None:
    first = create(client, alice, CRON, key="sched-1")
    again = create(client, alice, CRON, key="sched-1")
    assert (again.status_code, again["Idempotent-Replayed"]) == (201, "true")
    assert again.json() == first.json() and Schedule.objects.count() == 1
    other = create(client, alice, {**CRON, "cron": "0 10 * * *"}, key="sched-1")
    problem(other, 422, "idempotency-key-reused")
    missing = client.post(
        SCHEDULES, data=json.dumps(CRON), content_type="application/json", headers=alice.headers()
    )
    body = problem(missing, 400, "idempotency-key-missing")
    assert body["detail"].startswith("POST /api/schedules/ needs an Idempotency-Key")
    assert Schedule.objects.count() == 1


def test_the_per_token_limit_refuses_the_next_create(client, alice, settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_SCHEDULES_PER_TOKEN": 2}
    ids = [create(client, alice, CRON, key=f"k{n}").json()["id"] for n in range(2)]
    refused = create(client, alice, CRON, key="k2")
    body = problem(refused, 409, "schedule-limit-reached")
    assert body["limit"] == 2 and "already owns 2 schedules" in body["detail"]
    assert Schedule.objects.count() == 2
    # A replay is not refused; another token has a limit of its own.
    assert create(client, alice, CRON, key="k0").status_code == 201
    assert create(client, make_caller("bob", "acme"), CRON).status_code == 201
    # Deleting one makes room.
    client.delete(f"{SCHEDULES}{ids[0]}/", headers=alice.headers())
    assert create(client, alice, CRON, key="k3").status_code == 201


def test_a_fired_one_shot_no_longer_counts_against_the_limit(client, alice, settings) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_SCHEDULES_PER_TOKEN": 1}
    body = create(client, alice, {"kind": "test.echo", "run_at": in_hours(1)}).json()
    problem(create(client, alice, CRON), 409, "schedule-limit-reached")
    schedules.tick(now=dt.datetime.fromisoformat(body["run_at"]) + dt.timedelta(seconds=1))
    assert create(client, alice, CRON).status_code == 201


def test_another_tenant_can_neither_see_nor_touch_a_schedule(client, alice, mallory) -> None:
    url = create(client, alice, CRON).json()["url"]
    assert client.get(SCHEDULES, headers=mallory.headers()).json()["schedules"] == []
    problem(client.get(url, headers=mallory.headers()), 404, "not-found")
    problem(post(client, mallory, f"{url}pause/"), 404, "not-found")
    problem(post(client, mallory, f"{url}resume/"), 404, "not-found")
    problem(client.delete(url, headers=mallory.headers()), 404, "not-found")
    row = Schedule.objects.get()
    assert row.paused_at is None
    # The same key in another tenant is another schedule, not a replay.
    assert create(client, mallory, CRON, key="same").status_code == 201
    assert create(client, alice, CRON, key="same").status_code == 201
    assert Schedule.objects.count() == 3


def test_staff_and_settings_schedules_are_not_the_apis(client, alice) -> None:
    admin_made = schedules.define(
        "staff-digest", cron="0 3 * * *", kind="test.echo", tenant="acme"
    )
    assert client.get(SCHEDULES, headers=alice.headers()).json()["schedules"] == []
    problem(client.get(f"{SCHEDULES}{uuid.uuid4()}/", headers=alice.headers()), 404, "not-found")
    problem(client.get(f"{SCHEDULES}{admin_made.pk}/", headers=alice.headers()), 404, "not-found")


@pytest.mark.parametrize(
    ("body", "pointer", "detail"),
    [
        ({**CRON, "cron": "0 9 * *"}, "/cron", "has 4 fields"),
        ({**CRON, "cron": "61 * * * *"}, "/cron", "is not a valid cron expression"),
        ({**CRON, "cron": "0 0 30 2 *"}, "/cron", "Bad day-of-month"),
        ({**CRON, "timezone": "Mars/Olympus"}, "/timezone", "unknown time zone"),
        ({"kind": "test.echo"}, "/cron", "is required unless run_at is given"),
        ({**CRON, "run_at": "2099-01-01T00:00:00Z"}, "/run_at", "not both"),
        ({"kind": "test.echo", "run_at": "2020-01-01T00:00:00Z"}, "/run_at", "is in the past"),
        ({"kind": "test.echo", "run_at": "tomorrow"}, "/run_at", "must be an RFC 3339"),
        (
            {"kind": "test.echo", "run_at": "2099-01-01T00:00:00Z", "timezone": "UTC"},
            "/timezone",
            "applies to cron only",
        ),
        ({**CRON, "on_busy": "enqueue"}, "/on_busy", "applies to a schedule aimed at a session"),
        ({**CRON, "session_id": "s", "on_busy": "later"}, "/on_busy", "must be one of"),
        ({**CRON, "overlap": "sometimes"}, "/overlap", "must be one of"),
        ({**CRON, "runs_may_schedule": "yes"}, "/runs_may_schedule", "must be true or false"),
        ({**CRON, "every": "day"}, "/every", "unknown field"),
        ({**CRON, "kind": "runqueue.housekeeping"}, "/kind", "is reserved"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(client, alice, body, pointer, detail) -> None:
    answer = problem(create(client, alice, body), 422, "validation-failed")
    assert any(e["pointer"] == pointer and detail in e["detail"] for e in answer["errors"]), answer
    assert not Schedule.objects.exists() and not QueueEvent.objects.exists()


def test_an_unknown_kind_or_a_priority_above_the_ceiling_is_refused(client) -> None:
    caller = make_caller("carol", "acme", max_priority_class=10)
    problem(create(client, caller, {**CRON, "kind": "no.such.kind"}), 422, "kind-not-allowed")
    problem(create(client, caller, {**CRON, "priority": 0}), 422, "priority-not-allowed")
    problem(create(client, caller, [1, 2]), 422, "validation-failed")
    assert not Schedule.objects.exists()


def test_an_oversized_payload_or_body_is_refused_and_writes_nothing(
    client, alice, settings
) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "MAX_PAYLOAD_BYTES": 1000}
    answer = problem(
        create(client, alice, {**CRON, "payload": "x" * 1200}), 422, "validation-failed"
    )
    assert answer["errors"] == [
        {"pointer": "/payload", "detail": "is 1202 bytes as JSON, over the 1000-byte limit"}
    ]
    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_MAX_BODY_BYTES": 1024}
    problem(create(client, alice, {**CRON, "payload": "x" * 2000}), 413, "payload-too-large")
    assert not Schedule.objects.exists() and not QueueEvent.objects.exists()


def test_list_filters_by_session_and_pages(client, alice) -> None:
    for n in range(3):
        create(client, alice, {**CRON, "session_id": f"s{n % 2}"})
    assert (
        len(client.get(f"{SCHEDULES}?session_id=s0", headers=alice.headers()).json()["schedules"])
        == 2
    )
    first = client.get(f"{SCHEDULES}?limit=2", headers=alice.headers()).json()
    assert len(first["schedules"]) == 2 and first["next"] is not None
    second = client.get(first["next"], headers=alice.headers()).json()
    assert len(second["schedules"]) == 1 and second["next"] is None
    ids = [s["id"] for s in first["schedules"] + second["schedules"]]
    assert ids == sorted(ids) and len(set(ids)) == 3
    problem(
        client.get(f"{SCHEDULES}?after=nope", headers=alice.headers()), 400, "invalid-parameter"
    )


def test_schedule_writes_count_against_the_tokens_quota(client) -> None:
    caller = make_caller("dave", "acme", submit_quota=1, submit_window_seconds=3600)
    assert create(client, caller, CRON).status_code == 201
    problem(create(client, caller, CRON), 429, "rate-limited")
    assert Schedule.objects.count() == 1
