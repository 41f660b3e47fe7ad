"""``ctx.stream`` end to end with real processes: a ``runworker`` streams
2,000 deltas while clients of a real gunicorn connect at random points,
drop off and reconnect with Last-Event-ID, or come after the run ended;
each ends with the handler's text. Then: how few rows the turn wrote, and
a worker fenced mid-stream whose deltas reach no client."""

from __future__ import annotations

import http.client
import json
import math
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from django.db import connection

import runqueue
from runqueue import events
from runqueue.models import EventLog, Run, RunStatus
from runqueue.stream import sse
from tests.api_helpers import ApiCaller, make_caller
from tests.handlers import token_deltas
from tests.helpers import wait_until
from tests.topologies import gunicorn

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
CLIENTS = 6
FLUSH_MS = 1000


@pytest.fixture
def web(tmp_path) -> Iterator[int]:
    """gunicorn serving the project on the test database, room for CLIENTS streams."""
    settings = {"STREAM_MAX_PER_PROCESS": CLIENTS + 2, "STREAM_MAX_PER_TOKEN": None}
    yield from gunicorn.serve(tmp_path / "gunicorn.log", settings, CLIENTS + 2)


@dataclass
class Text:
    """A client's text, assembled by offset; a claim starts a new turn."""

    chars: list[str | None] = field(default_factory=list)
    conflicts: int = 0
    live: int = 0  # deltas (messages without an id) received

    def put(self, offset: int, piece: str) -> None:
        self.chars.extend([None] * (offset + len(piece) - len(self.chars)))
        for i, char in enumerate(piece, offset):
            if self.chars[i] is not None and self.chars[i] != char:
                self.conflicts += 1
            self.chars[i] = char

    def value(self) -> str | None:
        return None if None in self.chars else "".join(self.chars)  # type: ignore[arg-type]


def read(
    port: int,
    caller: ApiCaller,
    run_id: object,
    text: Text,
    last_id: str | None,
    stop_after: int | None,
) -> tuple[str | None, bool]:
    """One connection: apply messages to ``text``; (last id, ended)."""
    headers = caller.headers() | {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", f"/api/runs/{run_id}/stream/", headers=headers)
        response = conn.getresponse()
        if response.status == 204:
            return last_id, True
        assert response.status == 200, response.read()
        message: dict[str, str] = {}
        seen = 0
        while True:
            line = response.readline()
            if not line:
                return last_id, False
            line_text = line.decode().rstrip("\n")
            if line_text:
                name, _, value = line_text.partition(":")
                message[name] = value.removeprefix(" ")
                continue
            if "event" not in message:
                message = {}
                continue
            if "id" in message:
                last_id = message["id"]  # a cursor: sent back as it came
            data = json.loads(message["data"])
            if message["event"] in (events.CLAIMED, sse.RESET):
                text.chars = []  # a new turn's text
            elif message["event"] == events.TEXT:
                text.put(data["offset"], data["text"])
                text.live += "id" not in message
            elif message["event"] in (events.SUCCEEDED, events.FAILED, events.CANCELLED):
                return last_id, True
            message = {}
            seen += 1
            if stop_after is not None and seen >= stop_after:
                return last_id, False  # drop off mid-stream
    finally:
        conn.close()


def client(
    port: int,
    caller: ApiCaller,
    run_id: object,
    seed: int,
    started: threading.Event,
    out: list[Text],
) -> None:
    """Connect at a random point of the run, drop off after a random number
    of messages and reconnect with the last id, until the stream ends."""
    rng = random.Random(seed)
    text = Text()
    started.wait(rng.uniform(0, 3))  # a random moment of the run (or after it)
    last_id = None
    for _ in range(200):
        last_id, ended = read(port, caller, run_id, text, last_id, rng.choice([None, 5, 40, 300]))
        if ended:
            out.append(text)
            return
    raise AssertionError("the stream never ended")


def test_every_client_ends_with_the_streamed_text(start_worker, web: int) -> None:
    alice = make_caller("alice", "acme")
    payload = {"deltas": 2000, "seed": 11, "pace_ms": 1}
    run = runqueue.submit(kind="test.stream", tenant="acme", payload=payload).run
    texts: list[Text] = []
    never: threading.Event = threading.Event()  # clients wait their random delay on it
    threads = [
        threading.Thread(target=client, args=(web, alice, run.id, seed, never, texts))
        for seed in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    worker = start_worker("--slots", "interactive=1", settings={"STREAM_TEXT_FLUSH_MS": FLUSH_MS})
    for thread in threads:
        thread.join(120)
    wait_until(lambda: Run.objects.get(id=run.id).is_terminal, what="the run to end")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, worker.output()
    assert len(texts) == CLIENTS
    assert [t.value() == run.result["text"] for t in texts] == [True] * CLIENTS
    assert sum(t.conflicts for t in texts) == 0
    assert sum(t.live for t in texts) > 0  # some text came live, not only from rows
    # A client that comes after the run ended replays the rows alone.
    late = Text()
    assert read(web, alice, run.id, late, None, None)[1]
    assert late.value() == run.result["text"] and late.live == 0

    # The durable rows: at most one run.text per FLUSH_MS of the turn or
    # 8 KiB of its text (STREAM_TEXT_FLUSH_BYTES), and the turn's last.
    rows = list(EventLog.objects.filter(run_id=run.id).values_list("type", flat=True))
    seconds = (run.finished_at - run.started_at).total_seconds()
    chunks = (
        math.ceil(seconds * 1000 / FLUSH_MS)
        + math.ceil(len(run.result["text"].encode()) / 8192)
        + 1
    )
    assert 1 <= rows.count(events.TEXT) <= chunks, (rows, seconds)
    assert len(rows) == rows.count(events.TEXT) + 3  # created, claimed, succeeded
    worker.stop()


def test_a_worker_fenced_mid_stream_reaches_no_client(start_worker, web: int) -> None:
    """A cancel lands while the worker streams: the client's text is a
    prefix of what the handler meant to stream, and nothing arrives after
    the cancel."""
    alice = make_caller("alice", "acme")
    payload = {"deltas": 100000, "seed": 5, "pace_ms": 1}
    run = runqueue.submit(kind="test.stream", tenant="acme", payload=payload).run
    worker = start_worker("--slots", "interactive=1", settings={"STREAM_TEXT_FLUSH_MS": FLUSH_MS})
    wait_until(
        lambda: EventLog.objects.filter(run_id=run.id, type=events.TEXT).exists(),
        what="the first text chunk",
    )
    text = Text()
    seen_live = threading.Event()

    class Watch(Text):
        def put(self, offset: int, piece: str) -> None:
            text.put(offset, piece)
            seen_live.set()

    result: list[tuple[int | None, bool]] = []
    reader = threading.Thread(
        target=lambda: result.append(read(web, alice, run.id, Watch(), None, None))
    )
    reader.start()
    assert seen_live.wait(30)
    runqueue.cancel(run.id, reason="stop", actor="test")
    reader.join(60)
    assert result and result[0][1]  # the stream ended at run.cancelled
    meant = "".join(token_deltas(5, 100000))
    got = [i for i, char in enumerate(text.chars) if char is not None]
    assert got and all(text.chars[i] == meant[i] for i in got)  # nothing but the handler's
    assert text.conflicts == 0
    assert Run.objects.get(id=run.id).status == RunStatus.CANCELLED
    # Nothing beyond what was published before the fence reached the client.
    stopped = wait_until(lambda: _ledger(run.id, "stream.stopped"), what="the handler to stop")
    assert max(got) < int(stopped)
    worker.stop()


def _ledger(run_id: object, what: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE run_id = %s AND what = %s",
            [str(run_id), what],
        )
        row = cursor.fetchone()
    return row[0] if row else None
