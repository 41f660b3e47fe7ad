"""The event stream's parts in one process: the trigger that wakes it, the
ordering its cursor relies on, the endpoint's answers, and ``ctx.emit``.
The stream through a real gunicorn is in test_stream_gunicorn.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

import runqueue
from runqueue import leases, runtime, testing
from runqueue.models import EventLog, Run, RunStatus, StreamWatch
from runqueue.sql import execute
from runqueue.stream import hub as hub_module
from runqueue.stream import sse
from runqueue.stream.emit import check
from tests.api_helpers import make_caller, problem
from tests.helpers import Worker, is_blocked, wait_until


@pytest.fixture(autouse=True)
def _fresh_hub() -> Iterator[None]:
    yield
    hub_module.reset()  # its LISTEN connection must not outlive the test database


def _stream_url(run_id: object) -> str:
    return f"/api/runs/{run_id}/stream/"


def _watch(run_id: object, watcher: str = "test") -> None:
    with connection.cursor() as cursor:
        execute(cursor, "stream_watch", {"run_id": run_id, "watcher": watcher, "ttl_seconds": 60})


def _notified(conn, seconds: float = 0.5) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=seconds)]


@pytest.mark.django_db(transaction=True)
def test_the_trigger_notifies_appends_to_watched_runs_only(raw_connect) -> None:
    """Every insert path (the ORM's events.append, the claim's and the
    finish's SQL) NOTIFYs runqueue_events for a watched run, and nothing for
    a run no stream watches."""
    listener = raw_connect()
    listener.execute("LISTEN runqueue_events")
    watched = runqueue.submit(kind="k").run
    unwatched = runqueue.submit(kind="k", priority=5).run
    _watch(watched.id)
    assert _notified(listener, 0.2) == []  # the submits' events came before the watch

    claimed = leases.claim("w", limit=2)  # one statement, events for both runs
    assert {lease.run_id for lease in claimed} == {watched.id, unwatched.id}
    assert _notified(listener) == [str(watched.id)]

    for lease in claimed:
        assert leases.append_event(lease, "progress", {"n": 1})  # the ORM path
    assert _notified(listener) == [str(watched.id)]

    for lease in claimed:
        assert testing.succeed(lease)  # the finish statement
    assert _notified(listener) == [str(watched.id)]

    StreamWatch.objects.all().delete()
    runqueue.cancel(runqueue.submit(kind="k").run.id, reason="r", actor="t")
    assert _notified(listener, 0.2) == []


@pytest.mark.django_db(transaction=True)
def test_a_fenced_event_waits_for_the_runs_writer(hooks) -> None:
    """run.fenced is appended under the run row's lock: while the run's new
    owner is inside a write (its event inserted, not committed), the fenced
    worker's event waits, so the run's event ids follow commit order."""
    runqueue.submit(kind="k")
    old = leases.claim_one("old", lease_seconds=30)
    leases.release(old, "test")  # epoch moves on; `old` is stale
    old.closed = False
    new = leases.claim_one("new", lease_seconds=30)
    inside, release = threading.Event(), threading.Event()

    def pause(_lease: leases.Lease, _action: str) -> None:
        inside.set()
        release.wait(30)

    hooks.inside_fence = pause
    writer = Worker(lambda: leases.append_event(new, "progress", {"n": 1}), "writer")
    writer.start()
    assert inside.wait(30)
    from runqueue.leases.fence import record_fenced

    fenced = Worker(lambda: record_fenced(old, "heartbeat"), "fenced")
    fenced.start()
    fenced.started_fn.wait(30)
    wait_until(lambda: is_blocked(fenced.backend_pid), what="the fenced event to wait")
    release.set()
    assert writer.outcome() is True
    fenced.outcome()
    types = list(EventLog.objects.filter(run_id=new.run_id).values_list("type", flat=True))
    assert types[-2:] == ["progress", "run.fenced"]


@pytest.mark.django_db(transaction=True)
def test_a_finished_run_is_replayed_then_the_stream_ends() -> None:
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    lease = leases.claim_one("w")
    runtime.build_context(lease).emit("progress", {"pct": 50})
    testing.succeed(lease, {"ok": True})
    ids = list(EventLog.objects.filter(run_id=run.id).values_list("id", flat=True))

    response = Client().get(_stream_url(run.id), headers=alice.headers())
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream; charset=utf-8"
    assert response["Cache-Control"] == "no-cache"
    text = b"".join(response.streaming_content).decode()
    messages = [m for m in text.split("\n\n") if m]
    assert messages[0] == f"retry: {sse.RETRY_MS}"
    assert [_event_id(m.split("\n")[0]) for m in messages[1:]] == ids
    last = messages[-1].split("\n")
    assert last[1] == "event: run.succeeded"
    body = json.loads(last[2].removeprefix("data: "))
    assert body["id"] == ids[-1] and body["data"] == {"attempt": 1}
    progress = [m for m in messages if "event: progress" in m][0].split("\n")
    assert json.loads(progress[2].removeprefix("data: "))["data"] == {"pct": 50}

    # Resumed after its third event, then after the last one: 204 stops EventSource.
    again = Client().get(
        _stream_url(run.id), headers=alice.headers(**{"Last-Event-ID": str(ids[1])})
    )
    resent = b"".join(again.streaming_content).decode()
    assert [_event_id(line) for line in resent.split("\n") if line.startswith("id:")] == ids[2:]
    done = Client().get(_stream_url(run.id) + f"?after={ids[-1]}", headers=alice.headers())
    assert done.status_code == 204
    assert hub_module.process_hub().open_streams == 0  # every stream gave its slot back
    assert not StreamWatch.objects.exists()  # and its watch row


@pytest.mark.django_db(transaction=True)
def test_another_tenants_run_is_a_404_like_a_missing_one() -> None:
    make_caller("alice", "acme")
    bob = make_caller("bob", "other")
    run = runqueue.submit(kind="k", tenant="acme").run
    theirs = problem(Client().get(_stream_url(run.id), headers=bob.headers()), 404, "not-found")
    missing = problem(
        Client().get(_stream_url("6f1c2a52-0000-4000-8000-000000000000"), headers=bob.headers()),
        404,
        "not-found",
    )
    assert {k: v for k, v in theirs.items() if k != "instance"} == {
        k: v for k, v in missing.items() if k != "instance"
    }
    anonymous = Client().get(_stream_url(run.id))
    problem(anonymous, 401, "unauthenticated")


def _event_id(line: str) -> int:
    """The event id of an ``id: <event id>.<stamp>`` line."""
    return int(line.removeprefix("id: ").partition(".")[0])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cursor", ["abc", "-1", "1.X", "1.5.5", "99999999999999999999"])
def test_a_malformed_cursor_is_a_400(cursor: str) -> None:
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    by_header = Client().get(
        _stream_url(run.id), headers=alice.headers(**{"Last-Event-ID": cursor})
    )
    assert problem(by_header, 400, "invalid-parameter")["parameter"] == "Last-Event-ID"
    by_query = Client().get(_stream_url(run.id) + "?after=1.5", headers=alice.headers())
    assert problem(by_query, 400, "invalid-parameter")["parameter"] == "after"


@pytest.mark.django_db(transaction=True)
def test_streams_per_process_are_bounded(settings) -> None:
    settings.RUNQUEUE = {"STREAM_MAX_PER_PROCESS": 1}
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    first = Client().get(_stream_url(run.id), headers=alice.headers())
    assert first.status_code == 200  # holds the slot until closed
    busy = Client().get(_stream_url(run.id), headers=alice.headers())
    assert problem(busy, 503, "too-many-streams")
    assert busy["Retry-After"] == "5"
    first.close()
    second = Client().get(_stream_url(run.id), headers=alice.headers())
    assert second.status_code == 200
    second.close()
    assert hub_module.process_hub().open_streams == 0


@pytest.mark.django_db(transaction=True)
def test_a_live_stream_gets_events_as_they_commit(settings) -> None:
    """Read in a thread: the stream replays, then waits, and each event a
    worker appends arrives (woken by NOTIFY: the poll is a minute)."""
    settings.RUNQUEUE = {"STREAM_POLL_SECONDS": 60, "STREAM_KEEPALIVE_SECONDS": 60}
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    response = Client().get(_stream_url(run.id), headers=alice.headers())
    received: list[str] = []

    def read() -> None:
        for chunk in response.streaming_content:
            received.append(chunk.decode())

    reader = Worker(read, "reader")
    reader.start()
    wait_until(lambda: any("run.created" in m for m in received), what="the replay")
    lease = leases.claim_one("w")
    wait_until(lambda: any("run.claimed" in m for m in received), timeout=10, what="claimed")
    runtime.build_context(lease).emit("progress", {"pct": 10})
    wait_until(lambda: any("event: progress" in m for m in received), timeout=10, what="emit")
    testing.succeed(lease)
    reader.outcome(10)  # the stream ended after run.succeeded
    assert "event: run.succeeded" in received[-1]
    response.close()


# --- ctx.emit -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_type", "data", "message"),
    [
        ("run.succeeded", {}, "is reserved"),
        ("tool.completed", {}, "is reserved"),
        ("", {}, "must be 1-64 characters"),
        ("has space", {}, "must be 1-64 characters"),
        ("x" * 65, {}, "must be 1-64 characters"),
        ("progress\nevent: run.succeeded", {}, "must be 1-64 characters"),
        ("progress", [1, 2], "must be a JSON object"),
        ("progress", {"x": object()}, "not JSON-serialisable"),
        ("progress", {"x": float("nan")}, "not JSON-serialisable"),
        ("progress", {"x": "a\x00b"}, "NUL character"),
        ("progress", {"x": "y" * 20000}, "the limit is 16384"),
    ],
)
def test_emit_refuses_bad_events(event_type: str, data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check(event_type, data)


@pytest.mark.django_db(transaction=True)
def test_emit_appends_through_the_fence_and_refuses_without_writing(settings) -> None:
    settings.RUNQUEUE = {"EMIT_MAX_BYTES": 100}
    runqueue.submit(kind="k")
    ctx = runtime.build_context(leases.claim_one("w"))
    assert ctx.emit("progress", {"pct": 5}) is True
    assert ctx.emit("token.delta") is True
    with pytest.raises(ValueError, match="the limit is 100"):
        ctx.emit("progress", {"text": "z" * 200})
    rows = EventLog.objects.filter(run_id=ctx.run.id).exclude(type__startswith="run.")
    assert list(rows.values_list("type", "data")) == [
        ("progress", {"pct": 5}),
        ("token.delta", {}),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_fenced_workers_emit_is_never_published(fast_retry) -> None:
    """After another worker took the run over, the old worker's emit writes
    nothing (only run.fenced) and a stream never shows it."""
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    stale = runtime.build_context(leases.claim_one("old", lease_seconds=30))
    Run.objects.filter(id=run.id).update(lease_expires_at=Run.objects.get(id=run.id).created_at)
    assert leases.sweep()  # requeued: a new epoch
    fresh = runtime.build_context(leases.claim_one("new", lease_seconds=30))
    assert stale.emit("progress", {"from": "old"}) is False
    assert stale.fenced
    assert fresh.emit("progress", {"from": "new"}) is True
    testing.succeed(fresh.lease)
    progress = EventLog.objects.filter(run_id=run.id, type="progress")
    assert list(progress.values_list("data", "lease_epoch")) == [
        ({"from": "new"}, fresh.lease.epoch)
    ]
    text = b"".join(Client().get(_stream_url(run.id), headers=alice.headers()).streaming_content)
    assert b'"from":"old"' not in text and b'"from":"new"' in text
    assert b"event: run.fenced" in text
    assert Run.objects.get(id=run.id).status == RunStatus.SUCCEEDED


def _open(caller, run_id: object):
    return Client().get(_stream_url(run_id), headers=caller.headers())


@pytest.mark.django_db(transaction=True)
def test_streams_per_token_are_bounded_with_429(settings) -> None:
    """Issue 26: one token took every stream place of every process."""
    settings.RUNQUEUE = {"STREAM_MAX_PER_PROCESS": 4, "STREAM_MAX_PER_TOKEN": 1}
    alice = make_caller("alice", "acme")
    other_token = make_caller("alice2", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    first = _open(alice, run.id)
    assert first.status_code == 200
    refused = _open(alice, run.id)
    body = problem(refused, 429, "stream-limit")
    assert (body["scope"], body["limit"]) == ("token", 1)
    assert refused["Retry-After"] == "5"
    second = _open(other_token, run.id)  # another token of the tenant: its own place
    assert second.status_code == 200
    first.close()
    again = _open(alice, run.id)
    assert again.status_code == 200
    again.close()
    second.close()
    assert hub_module.process_hub().open_streams == 0


@pytest.mark.django_db(transaction=True)
def test_streams_per_tenant_are_bounded_and_other_tenants_still_stream(settings) -> None:
    settings.RUNQUEUE = {
        "STREAM_MAX_PER_PROCESS": 3,
        "STREAM_MAX_PER_TOKEN": None,
        "STREAM_MAX_PER_TENANT": 2,
    }
    acme = [make_caller(f"acme{i}", "acme") for i in range(3)]
    bob = make_caller("bob", "other")
    mine = runqueue.submit(kind="k", tenant="acme").run
    theirs = runqueue.submit(kind="k", tenant="other").run
    held = [_open(acme[0], mine.id), _open(acme[1], mine.id)]
    assert [r.status_code for r in held] == [200, 200]
    body = problem(_open(acme[2], mine.id), 429, "stream-limit")
    assert (body["scope"], body["limit"]) == ("tenant", 2)
    other = _open(bob, theirs.id)
    assert other.status_code == 200
    for response in [*held, other]:
        response.close()
    assert hub_module.process_hub().held("tenant:acme") == 0


@pytest.mark.django_db(transaction=True)
def test_a_finished_runs_stream_takes_no_process_place(settings) -> None:
    """Issue 26: another tenant's stream of its own finished run got 503
    while one tenant's live streams held every place."""
    settings.RUNQUEUE = {"STREAM_MAX_PER_PROCESS": 1}
    alice = make_caller("alice", "acme")
    bob = make_caller("bob", "other")
    finished = runqueue.submit(kind="k", tenant="other").run
    lease = leases.claim_one("w")
    assert lease is not None and lease.run_id == finished.id
    testing.succeed(lease, {"ok": True})
    live = runqueue.submit(kind="k", tenant="acme").run
    holding = _open(alice, live.id)
    assert holding.status_code == 200
    assert problem(_open(alice, live.id), 503, "too-many-streams")

    replay = _open(bob, finished.id)
    assert replay.status_code == 200
    text = b"".join(replay.streaming_content).decode()  # ends by itself
    assert text.rstrip().split("\n\n")[-1].split("\n")[1] == "event: run.succeeded"
    replay.close()
    assert not StreamWatch.objects.filter(run_id=finished.id).exists()
    assert hub_module.process_hub().open_streams == 1  # alice's live stream only
    holding.close()
    assert hub_module.process_hub().open_streams == 0


@pytest.mark.django_db(transaction=True)
def test_a_cursor_a_failover_lost_replays_the_run_after_a_reset() -> None:
    """A failover that lost the last WAL reissues the lost events' ids to new
    events. A client resuming with a cursor from the lost timeline is told to
    reset and gets the run's events from the first: it ends with exactly the
    server's list, no gap, no duplicate. A cursor on this server's history
    resumes after it without a reset."""
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    lease = leases.claim_one("w")
    ctx = runtime.build_context(lease)
    for step in range(4):
        ctx.emit("progress", {"step": step})
    client: list[tuple[int, str]] = []  # what the client holds: (id, type)

    def read(headers: dict) -> list[str]:
        response = Client().get(_stream_url(run.id), headers=alice.headers(**headers))
        if response.status_code == 204:
            return []  # finished, nothing after the cursor
        text = b"".join(response.streaming_content).decode()
        return [m for m in text.split("\n\n") if m and not m.startswith("retry:")]

    def apply(messages: list[str]) -> str | None:
        last = None
        for message in messages:
            lines = dict(line.split(": ", 1) for line in message.split("\n"))
            if lines["event"] == sse.RESET:
                client.clear()
                continue
            client.append((_event_id("id: " + lines["id"]), lines["event"]))
            last = lines["id"]
        return last

    testing.succeed(lease, {"ok": True})
    first = read({})
    cursor = [m for m in first if "event: progress" in m][-1].split("\n")[0].removeprefix("id: ")
    apply(first[: [i for i, m in enumerate(first) if cursor in m][0] + 1])
    # Resumed on this server's history: no reset, nothing twice.
    resumed = read({"Last-Event-ID": cursor})
    assert not any(sse.RESET in m for m in resumed)
    apply(resumed)
    assert client == list(EventLog.objects.filter(run_id=run.id).values_list("id", "type"))

    # The failover: the last two events lost, their ids issued again to other events.
    lost = list(EventLog.objects.filter(run_id=run.id).order_by("-id")[:2])
    with connection.cursor() as cursor_:
        for event in lost:
            cursor_.execute(
                "DELETE FROM runqueue_run_event WHERE run_id = %s AND id = %s", [run.id, event.id]
            )
            # The success is the run's row (migration 0024): lost with it.
            cursor_.execute(
                "UPDATE runqueue_run SET success_event_id = NULL"
                " WHERE id = %s AND success_event_id = %s",
                [run.id, event.id],
            )
            cursor_.execute(
                "INSERT INTO runqueue_run_event (id, run_id, type, lease_epoch, data, created_at)"
                " VALUES (%s, %s, %s, %s, '{}', now())",
                [event.id, run.id, "other.event", event.lease_epoch],
            )
    stale = f"{lost[0].id}.{sse.stamp(lost[0].created_at)}"
    replayed = read({"Last-Event-ID": stale})
    assert replayed[0].startswith(f"event: {sse.RESET}")
    apply(replayed)
    assert client == list(
        EventLog.objects.filter(run_id=run.id).order_by("id").values_list("id", "type")
    )
    # The plain number an older client sends is resumed after, as before.
    assert read({"Last-Event-ID": str(lost[0].id)}) == []


@pytest.mark.django_db(transaction=True)
def test_api_tokens_see_no_lease_token_nor_worker_owner_and_staff_do(settings) -> None:
    """Issue 47 item 5: the events page and the stream showed each claim's
    lease token and its worker's owner string (host, pid) to any API client
    of the tenant. They are for operators: an API token sees the attempt
    number instead; a staff session sees them."""
    from django.contrib.auth import get_user_model

    settings.RUNQUEUE = {**settings.RUNQUEUE, "API_SESSION_TENANT": "acme"}
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    lease = leases.claim_one("db-host-7/4242")
    assert lease is not None
    token = str(lease.token)
    testing.fail(lease, leases.permanent_failure(ValueError("no"), lease.attempt))

    page = Client().get(f"/api/runs/{run.id}/events/", headers=alice.headers()).content
    stream = b"".join(Client().get(_stream_url(run.id), headers=alice.headers()).streaming_content)
    for text in (page.decode(), stream.decode()):
        assert "run.claimed" in text and '"attempt":' in text.replace(": ", ":")
        assert token not in text and "db-host-7" not in text and "4242" not in text

    staff = get_user_model().objects.create_user("ops", password="pw", is_staff=True)
    operator = Client()
    operator.force_login(staff)
    page = operator.get(f"/api/runs/{run.id}/events/").content.decode()
    stream = b"".join(operator.get(_stream_url(run.id)).streaming_content).decode()
    for text in (page, stream):
        assert token in text and "db-host-7/4242" in text
