"""The event stream end to end: the deployable project under a real gunicorn
(config/gunicorn_conf.py, threaded workers), read by a real HTTP client
(http.client) while this process drives the run as a worker would."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import runqueue
from runqueue import leases, runtime, testing
from runqueue.models import EventLog
from tests.api_helpers import ApiCaller, make_caller
from tests.helpers import wait_until
from tests.topologies import gunicorn as web

REPO = Path(__file__).resolve().parents[2]
STREAMS = 2
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@dataclass
class Message:
    id: int | None = None
    cursor: str = ""
    event: str | None = None
    data: dict | None = None
    comment: str | None = None
    retry: int | None = None


@dataclass
class SseClient:
    """A Server-Sent Events reader over http.client: one message at a time."""

    port: int
    path: str
    headers: dict[str, str]
    conn: http.client.HTTPConnection = field(init=False)
    response: http.client.HTTPResponse = field(init=False)

    def __post_init__(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        self.conn.request(
            "GET", self.path, headers={"Accept": "text/event-stream", **self.headers}
        )
        self.response = self.conn.getresponse()

    def next(self) -> Message | None:
        """The next message or comment; None at the end of the stream."""
        message = Message()
        seen = False
        while True:
            line = self.response.readline()
            if not line:
                return None
            text = line.decode().rstrip("\n")
            if text == "":
                if seen:
                    return message
                continue
            seen = True
            name, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                message.comment = value
                return message
            if name == "id":  # a cursor: "<event id>.<stamp>"
                message.cursor = value
                message.id = int(value.partition(".")[0])
            elif name == "event":
                message.event = value
            elif name == "data":
                message.data = json.loads(value)
            elif name == "retry":
                message.retry = int(value)

    def event(self) -> Message:
        """The next event, skipping comments and the retry hint."""
        while True:
            message = self.next()
            assert message is not None, "the stream ended"
            if message.id is not None:
                return message

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def gunicorn(tmp_path) -> Iterator[int]:
    """gunicorn serving config.wsgi on the test database, one process."""
    # A minute's poll: an event that arrives sooner was woken by NOTIFY.
    settings = {
        "STREAM_MAX_PER_PROCESS": STREAMS,
        "STREAM_POLL_SECONDS": 60,
        "STREAM_KEEPALIVE_SECONDS": 1,
    }
    yield from web.serve(tmp_path / "gunicorn.log", settings, STREAMS)


def _ids(run_id: object) -> list[int]:
    return list(EventLog.objects.filter(run_id=run_id).order_by("id").values_list("id", flat=True))


def _stream(port: int, caller: ApiCaller, run_id: object, query: str = "", **headers: str):
    return SseClient(port, f"/api/runs/{run_id}/stream/{query}", caller.headers(**headers))


def test_a_reconnect_with_last_event_id_loses_and_repeats_nothing(gunicorn: int) -> None:
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme").run
    received: list[int] = []

    first = _stream(gunicorn, alice, run.id)
    assert first.response.status == 200
    assert first.response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
    hint = first.next()
    assert hint is not None and hint.retry == 2000
    created = first.event()
    assert created.event == "run.created" and created.data["type"] == "run.created"
    received.append(created.id)

    # Live: each event arrives while the poll is a minute away (NOTIFY).
    lease = leases.claim_one("w", lease_seconds=60)
    started = time.monotonic()
    claimed = first.event()
    assert claimed.event == "run.claimed"
    assert time.monotonic() - started < 10
    ctx = runtime.build_context(lease)
    ctx.emit("progress", {"step": 1})
    step = first.event()
    assert (step.event, step.data["data"]) == ("progress", {"step": 1})
    received += [claimed.id, step.id]
    first.close()  # the client drops off

    ctx.emit("progress", {"step": 2})
    ctx.emit("progress", {"step": 3})
    second = _stream(gunicorn, alice, run.id, **{"Last-Event-ID": step.cursor})
    for step_no in (2, 3):
        replayed = second.event()
        assert replayed.data["data"] == {"step": step_no}
        received.append(replayed.id)
    ctx.emit("progress", {"step": 4})
    live = second.event()
    assert live.data["data"] == {"step": 4}
    received.append(live.id)
    assert testing.succeed(lease, {"done": True})
    final = second.event()
    assert final.event == "run.succeeded"
    received.append(final.id)
    assert second.next() is None  # the stream ends after the terminal event
    second.close()

    assert received == _ids(run.id)  # every event once, in order

    after_end = _stream(gunicorn, alice, run.id, **{"Last-Event-ID": final.cursor})
    assert after_end.response.status == 204  # EventSource stops reconnecting
    by_query = _stream(gunicorn, alice, run.id, f"?after={received[3]}")
    tail = [by_query.event().id for _ in received[4:]]
    assert tail == received[4:]
    assert by_query.next() is None


def test_keep_alive_tenants_and_the_bound_on_open_streams(gunicorn: int) -> None:
    """A quiet stream gets keep-alive comments; another tenant's run is a
    404; past the bound a stream gets 503 while the admin still answers."""
    alice = make_caller("alice", "acme")
    bob = make_caller("bob", "other")
    runs = [runqueue.submit(kind="k", tenant="acme", priority=i).run for i in range(3)]

    theirs = _stream(gunicorn, bob, runs[0].id)
    assert theirs.response.status == 404
    assert json.loads(theirs.response.read())["type"] == "urn:runqueue:problem:not-found"

    open_streams = [_stream(gunicorn, alice, run.id) for run in runs[:STREAMS]]
    for stream in open_streams:
        assert stream.response.status == 200
        assert stream.event().event == "run.created"
    quiet = open_streams[0].next()
    assert quiet is not None and quiet.comment == "keep-alive"

    over_its_share = _stream(gunicorn, alice, runs[STREAMS].id)
    assert over_its_share.response.status == 429  # STREAM_MAX_PER_TOKEN (2) first
    over_its_share.close()
    carol = make_caller("carol", "acme")
    refused = _stream(gunicorn, carol, runs[STREAMS].id)
    assert refused.response.status == 503
    assert refused.response.getheader("Retry-After") == "5"
    body = json.loads(refused.response.read())
    assert body["type"] == "urn:runqueue:problem:too-many-streams"
    admin = http.client.HTTPConnection("127.0.0.1", gunicorn, timeout=10)
    admin.request("GET", "/admin/login/")
    assert admin.getresponse().status == 200

    open_streams[0].close()  # the server notices at its next write (a keep-alive)

    def accepted() -> bool:
        stream = _stream(gunicorn, carol, runs[STREAMS].id)
        ok = stream.response.status == 200
        stream.close()
        return ok

    wait_until(accepted, timeout=20, what="the freed stream slot")
    for stream in open_streams[1:]:
        stream.close()
