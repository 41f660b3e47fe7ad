"""``ctx.stream`` in one process: what a delta is allowed to be, the NOTIFY
that carries it (only while the lease holds, checked under the row's lock),
the few ``run.text`` events that keep it, and the flush at a turn's end.
Real worker and web processes: test_stream_text_live.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

import runqueue
from runqueue import events, leases, runtime, testing
from runqueue.models import EventLog
from runqueue.runtime import aio
from runqueue.sql import execute
from runqueue.stream import hub as hub_module
from runqueue.stream import sse, text
from tests.api_helpers import make_caller
from tests.handlers import token_deltas
from tests.helpers import CLAIM_CLEARED, is_blocked, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_hub() -> Iterator[None]:
    yield
    hub_module.reset()
    aio.close_connections()  # the async test's database threads


@pytest.fixture
def slow_flush(settings) -> None:
    """Text is made durable only by the turn's end (or a test's flush)."""
    settings.RUNQUEUE = {"STREAM_TEXT_FLUSH_MS": 60000, "STREAM_TEXT_FLUSH_BYTES": 1048576}


def _watch(run_id: object) -> None:
    with connection.cursor() as cursor:
        execute(cursor, "stream_watch", {"run_id": run_id, "watcher": "test", "ttl_seconds": 60})


def _until_sentinel(listener) -> list[tuple[str, int, int, str]]:
    """Every delta the listener got before a sentinel sent now: what was
    published is delivered before it (NOTIFYs arrive in commit order)."""
    listener.execute("SELECT pg_notify('runqueue_text', 'sentinel')")
    got = []
    for note in listener.notifies(timeout=10):
        if note.payload == "sentinel":
            return got
        parsed = text.parse(note.payload)
        assert parsed is not None
        got.append(parsed)
    raise AssertionError("the sentinel never arrived")


def _texts(run_id: object) -> list[dict]:
    return list(
        EventLog.objects.filter(run_id=run_id, type=events.TEXT)
        .order_by("id")
        .values_list("data", flat=True)
    )


def _assemble(chunks) -> str:
    chars: list[str | None] = []
    for offset, piece in chunks:
        chars.extend([None] * (offset + len(piece) - len(chars)))
        chars[offset : offset + len(piece)] = piece
    assert None not in chars, "a gap in the text"
    return "".join(chars)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("delta", "error", "message"),
    [
        (b"bytes", TypeError, "ctx.stream takes a str, got bytes"),
        (None, TypeError, "ctx.stream takes a str, got NoneType"),
        ("a\x00b", ValueError, "ctx.stream text contains NUL"),
        ("\ud800", ValueError, "ctx.stream text is not valid Unicode"),
    ],
)
def test_bad_deltas_are_refused_and_nothing_is_sent(raw_connect, delta, error, message) -> None:
    listener = raw_connect()
    listener.execute("LISTEN runqueue_text")
    run = runqueue.submit(kind="k").run
    _watch(run.id)
    ctx = runtime.build_context(leases.claim_one("w", lease_seconds=30))
    with pytest.raises(error, match=message):
        ctx.stream(delta)
    assert _until_sentinel(listener) == []
    assert ctx.text.offset == 0


def test_split_keeps_pieces_under_the_payload_limit() -> None:
    for sample in ["a" * 20000, "€" * 9000, "🙂x" * 5000, "short"]:
        pieces = text.split(sample, text.PIECE_BYTES)
        assert "".join(pieces) == sample
        assert all(0 < len(p.encode()) <= text.PIECE_BYTES for p in pieces)


def test_each_delta_is_notified_to_watched_runs_with_no_row(raw_connect, slow_flush) -> None:
    listener = raw_connect()
    listener.execute("LISTEN runqueue_text")
    watched = runqueue.submit(kind="k").run
    unwatched = runqueue.submit(kind="k", priority=5).run
    _watch(watched.id)
    ctxs = {lease.run_id: runtime.build_context(lease) for lease in leases.claim("w", limit=2)}
    ctx, other = ctxs[watched.id], ctxs[unwatched.id]
    rows = EventLog.objects.count()

    assert ctx.stream("Hello ") is True
    assert ctx.stream("wörld 🙂") is True
    assert ctx.stream("") is True
    assert other.stream("nobody watches") is True
    epoch = ctx.lease.epoch
    assert _until_sentinel(listener) == [
        (str(watched.id), epoch, 0, "Hello "),
        (str(watched.id), epoch, 6, "wörld 🙂"),
    ]
    assert EventLog.objects.count() == rows  # no row per delta

    big = "€" * 3000  # 9000 bytes: two NOTIFYs
    assert ctx.stream(big) is True
    pieces = _until_sentinel(listener)
    assert len(pieces) == 2 and [p[2] for p in pieces] == [13, 13 + len(pieces[0][3])]
    assert "".join(p[3] for p in pieces) == big

    assert ctx.text.flush() is True
    assert _texts(watched.id) == [{"offset": 0, "text": "Hello wörld 🙂" + big}]


def test_text_is_made_durable_every_so_many_bytes(settings) -> None:
    settings.RUNQUEUE = {"STREAM_TEXT_FLUSH_MS": 60000, "STREAM_TEXT_FLUSH_BYTES": 256}
    runqueue.submit(kind="k")
    ctx = runtime.build_context(leases.claim_one("w", lease_seconds=30))
    deltas = token_deltas(1, 400)
    for delta in deltas:
        assert ctx.stream(delta)
    ctx.text.flush()
    chunks = _texts(ctx.run.id)
    assert _assemble((c["offset"], c["text"]) for c in chunks) == "".join(deltas)
    assert all(len(c["text"].encode()) <= 256 + 12 for c in chunks[:-1] if "€" not in c["text"])
    assert len(chunks) < len(deltas) / 4


def test_an_idle_turns_text_is_flushed_by_the_flusher(settings) -> None:
    settings.RUNQUEUE = {"STREAM_TEXT_FLUSH_MS": 50, "STREAM_TEXT_FLUSH_BYTES": 1048576}
    runqueue.submit(kind="k")
    ctx = runtime.build_context(leases.claim_one("w", lease_seconds=30))
    assert ctx.stream("thinking...")
    # No further delta and no turn end: the process's flusher writes it.
    wait_until(lambda: _texts(ctx.run.id), what="the flusher's run.text")
    assert _texts(ctx.run.id) == [{"offset": 0, "text": "thinking..."}]


@pytest.mark.parametrize(
    ("extra", "last"),
    [({}, events.SUCCEEDED), ({"raise": True}, events.FAILED), ({"ask": True}, events.WAITING)],
)
def test_the_turns_end_flushes_before_its_outcome(slow_flush, extra, last) -> None:
    run = runqueue.submit(kind="test.stream", payload={"deltas": 50, "seed": 3, **extra}).run
    testing.execute(leases.claim_one("w", lease_seconds=30))
    types = list(
        EventLog.objects.filter(run_id=run.id).order_by("id").values_list("type", flat=True)
    )
    assert types == [events.CREATED, events.CLAIMED, events.TEXT, last]
    [chunk] = _texts(run.id)
    assert chunk == {"offset": 0, "text": "".join(token_deltas(3, 50))}


def test_an_async_handler_streams_with_await(slow_flush) -> None:
    run = runqueue.submit(kind="test.async_stream", payload={"deltas": 30, "seed": 4}).run
    assert testing.execute(leases.claim_one("w", lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert _assemble((c["offset"], c["text"]) for c in _texts(run.id)) == run.result["text"]


FENCES = {
    # Another claim's epoch (the sweeper's requeue): the row stays live.
    "requeued": "UPDATE runqueue_run SET status = 'queued', lease_epoch = lease_epoch + 1, "
    "lease_token = NULL, " + CLAIM_CLEARED + " WHERE id = %s",
    # A cancel: the row moves to the finished partition (40001 for a waiter).
    "cancelled": "UPDATE runqueue_run SET status = 'cancelled', lease_epoch = lease_epoch + 1, "
    "lease_token = NULL, finished_at = now(), " + CLAIM_CLEARED + " WHERE id = %s",
}


@pytest.mark.parametrize("fence", sorted(FENCES))
def test_a_delta_racing_a_fence_waits_for_it_and_reaches_no_one(raw_connect, fence) -> None:
    """The publishing statement locks the run row: a delta sent while a
    fence is uncommitted waits for it, then matches nothing and is never
    delivered; the one sent before reached the listener."""
    listener = raw_connect()
    listener.execute("LISTEN runqueue_text")
    run = runqueue.submit(kind="k").run
    _watch(run.id)
    ctx = runtime.build_context(leases.claim_one("w", lease_seconds=30))
    assert ctx.stream("before ")

    fencer = raw_connect(autocommit=False)
    fencer.execute(FENCES[fence], (run.id,))  # uncommitted: holds the row
    result: dict[str, object] = {}

    def stream() -> None:
        connection.ensure_connection()
        result["pid"] = connection.connection.info.backend_pid
        try:
            result["sent"] = ctx.stream("after")
        finally:
            connection.close()

    thread = threading.Thread(target=stream)
    thread.start()
    wait_until(lambda: "pid" in result and is_blocked(result["pid"]), what="the delta to wait")
    fencer.commit()
    thread.join(30)
    assert result["sent"] is False
    assert ctx.fenced
    assert [d[3] for d in _until_sentinel(listener)] == ["before "]
    assert EventLog.objects.filter(run_id=run.id, type=events.FENCED).count() == 1


def test_a_finished_runs_stream_replays_its_text_chunks() -> None:
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="test.stream", tenant="acme", payload={"deltas": 40}).run
    testing.execute(leases.claim_one("w", lease_seconds=30))
    run.refresh_from_db()
    body = b"".join(
        Client().get(f"/api/runs/{run.id}/stream/", headers=alice.headers()).streaming_content
    ).decode()
    texts = [m for m in body.split("\n\n") if "event: run.text" in m]
    import json

    chunks = [json.loads(m.split("data: ", 1)[1]) for m in texts]
    assert all(set(c) == {"offset", "text"} for c in chunks)
    assert _assemble((c["offset"], c["text"]) for c in chunks) == run.result["text"]


def test_the_stream_shows_deltas_of_its_lease_only() -> None:
    """A delta of an earlier lease is dropped; one of a later lease waits
    for its claim to be read."""
    run = runqueue.submit(kind="k").run
    stream = sse.EventStream(hub_module.process_hub(), run, 0, None)  # type: ignore[arg-type]
    stream.epoch = 2
    stream.deltas.extend([(1, 0, "old"), (2, 0, "now"), (3, 0, "next")])
    sent, ahead = stream._live_text()
    assert sent == sse.text_frame(0, "now") and ahead
    assert list(stream.deltas) == [(3, 0, "next")]


def test_a_flush_that_fails_keeps_its_text_for_the_next(slow_flush) -> None:
    """A flush whose connection is gone (here: its backend terminated, as a
    server restart does) writes nothing and loses nothing: the text stays
    pending, in front of what was streamed since, and the next flush writes
    the whole turn."""
    runqueue.submit(kind="k")
    ctx = runtime.build_context(leases.claim_one("w", lease_seconds=30))
    first, second = token_deltas(1, 40), token_deltas(2, 30)
    for delta in first:
        assert ctx.stream(delta)
    pid: list[int] = []
    terminated, failed = threading.Event(), []

    def flush_on_a_dead_connection() -> None:
        from django.db import connection as own

        try:
            with own.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            assert terminated.wait(10)
            ctx.text.flush()
        except Exception as exc:  # noqa: BLE001 - what the test reads
            failed.append(exc)
        finally:
            own.close()

    thread = threading.Thread(target=flush_on_a_dead_connection)
    thread.start()
    wait_until(lambda: pid, what="the flushing thread's connection")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid[0]])
    terminated.set()
    thread.join(10)
    assert failed, "the flush on a terminated connection raised nothing"
    assert _texts(ctx.run.id) == []
    for delta in second:
        assert ctx.stream(delta)
    assert ctx.text.flush()
    chunks = _texts(ctx.run.id)
    assert _assemble((c["offset"], c["text"]) for c in chunks) == "".join(first + second)
