"""A session you can read and stream: ``runqueue.session``, ``GET
/api/sessions/<id>/``, ``GET /api/sessions/<id>/stream/`` and the admin's
session page (runqueue/reads/sessions.py, runqueue/stream/session.py)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client

import runqueue
from runqueue import leases, runtime, testing
from runqueue.models import EventLog, Run, RunStatus
from runqueue.reads import sessions
from runqueue.stream import hub as hub_module
from tests.api_helpers import ApiCaller, make_caller, new_key, problem, submit
from tests.database.admin.test_admin import login
from tests.helpers import Worker, wait_until


@pytest.fixture(autouse=True)
def _fresh_hub() -> Iterator[None]:
    yield
    hub_module.reset()  # its LISTEN connection must not outlive the test database


def _turn(client: Client, caller: ApiCaller, text: str, on_busy: str | None = None):
    body = {"kind": "test.echo", "payload": {"text": text}, "session_id": "s1"}
    if on_busy is not None:
        body["on_busy"] = on_busy
    response = submit(client, caller, body, key=new_key())
    assert response.status_code in (201, 202), response.content
    return response.json()


def _session(client: Client, caller: ApiCaller, query: str = "", session_id: str = "s1"):
    return client.get(f"/api/sessions/{session_id}/{query}", headers=caller.headers())


def _messages(text: str) -> list[dict[str, str]]:
    """SSE messages as {field: value}, comments and the retry line left out."""
    out = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        fields = dict(line.split(": ", 1) for line in lines)
        if "event" in fields:
            out.append(fields)
    return out


# --- the read ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # each submit its own transaction: its own time
def test_the_body_lists_turns_in_order_with_statuses_through_enqueue_merge_interrupt_finish(
    client,
) -> None:
    alice = make_caller("alice", "acme")
    one = _turn(client, alice, "one")
    two = _turn(client, alice, "two", "enqueue")
    merged = _turn(client, alice, "and three", "merge")
    assert merged["id"] == two["id"]  # joined the pending turn
    four = _turn(client, alice, "stop, do this", "interrupt")

    body = _session(client, alice).json()
    assert [t["id"] for t in body["turns"]] == [one["id"], two["id"], four["id"]]
    assert [t["status"] for t in body["turns"]] == ["cancelled", "pending", "queued"]
    first, second, third = body["turns"]
    assert first["ended"] == {
        "status": "cancelled",
        "reason": "interrupted",
        "by": four["id"],
        "actor": first["ended"]["actor"],
    }
    assert second["payloads"] == [{"text": "two"}, {"text": "and three"}]
    assert (second["place"], second["ended"]) == (1, None)
    assert third["interrupted_id"] == one["id"]
    assert body["active"]["id"] == four["id"]
    assert [t["id"] for t in body["pending"]] == [two["id"]]
    assert first["links"] == {"run": f"/api/runs/{one['id']}/"}
    assert body["links"] == {
        "self": "/api/sessions/s1/",
        "stream": "/api/sessions/s1/stream/",
        "older": None,
    }
    assert body["usage"]["calls"] == 0

    # The interrupting turn answers; the pending one is queued next.
    testing.succeed(leases.claim_one("w"), {"answer": 4})
    body = _session(client, alice).json()
    assert [t["status"] for t in body["turns"]] == ["cancelled", "queued", "succeeded"]
    assert body["turns"][2]["result"] == {"answer": 4}
    assert body["turns"][2]["ended"] == {
        "status": "succeeded",
        "reason": None,
        "by": None,
        "actor": None,
    }
    assert (body["active"]["id"], body["pending"]) == (two["id"], [])


@pytest.mark.django_db(transaction=True)  # each submit its own transaction: its own time
def test_runqueue_session_in_python() -> None:
    a = runqueue.submit(kind="test.echo", session_id="chat", tenant="acme", payload={"t": 1}).run
    b = runqueue.submit(
        kind="test.echo", session_id="chat", tenant="acme", on_busy="enqueue", payload={"t": 2}
    ).run
    read = runqueue.session("chat", tenant="acme")
    assert isinstance(read, runqueue.Session)
    assert [t.id for t in read.turns] == [a.id, b.id]
    assert read.active is not None and read.active.id == a.id
    assert [t.id for t in read.pending] == [b.id]
    assert read.turns[1].payloads == [{"t": 2}]
    assert runqueue.session("chat", tenant="other") is None
    assert runqueue.session("nothing", tenant="acme") is None
    assert runqueue.session("bad\x00id", tenant="acme") is None
    with pytest.raises(runqueue.InvalidArgument):
        runqueue.session("chat", tenant="acme", limit=0)
    with pytest.raises(runqueue.InvalidArgument):
        runqueue.session("chat", tenant="acme", before="not-a-cursor")


@pytest.mark.django_db(transaction=True)  # each submit its own transaction: its own time
def test_a_cancelled_pending_turn_says_by_whom_and_why() -> None:
    runqueue.submit(kind="test.echo", session_id="chat")
    late = runqueue.submit(kind="test.echo", session_id="chat", on_busy="enqueue").run
    runqueue.cancel(late.id, reason="user withdrew it", actor="user:1")
    read = runqueue.session("chat")
    assert read is not None
    ended = read.turns[1].ended
    assert ended == sessions.Ending(status="cancelled", reason="user withdrew it", actor="user:1")


@pytest.mark.django_db
def test_another_tenants_session_is_404_like_a_missing_one(client) -> None:
    alice = make_caller("alice", "acme")
    bob = make_caller("bob", "globex")
    _turn(client, alice, "hello")
    theirs = problem(_session(client, bob), 404, "not-found")
    missing = problem(_session(client, bob, session_id="nope"), 404, "not-found")
    assert theirs["detail"] == missing["detail"]
    stream = client.get("/api/sessions/s1/stream/", headers=bob.headers())
    assert problem(stream, 404, "not-found")["detail"] == missing["detail"]
    assert problem(_session(client, alice, "?before=zz"), 400, "invalid-parameter")
    assert problem(_session(client, alice, "?limit=0"), 400, "invalid-parameter")
    bad = client.get(
        "/api/sessions/s1/stream/", headers=alice.headers(**{"Last-Event-ID": "12.ab"})
    )
    assert problem(bad, 400, "invalid-parameter")


# --- paging back a long session ---------------------------------------------------


def _long_session(count: int, session_id: str = "long", tenant: str = "acme") -> list[Run]:
    """``count`` finished turns, two at a time submitted at one instant (ties
    on created_at are broken by id), inserted as rows."""
    start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    rows = [
        Run(
            tenant=tenant,
            concurrency_key=tenant,
            session_id=session_id,
            kind="test.echo",
            payload={"n": n},
            status=RunStatus.SUCCEEDED,
            created_at=start + dt.timedelta(seconds=n // 2),
            finished_at=start + dt.timedelta(seconds=n // 2 + 1),
        )
        for n in range(count)
    ]
    Run.objects.bulk_create(rows)
    return sorted(rows, key=lambda r: (r.created_at, r.id))


@pytest.mark.django_db
def test_paging_back_a_long_session_shows_every_turn_once_in_order(client) -> None:
    alice = make_caller("alice", "acme")
    turns = _long_session(25)
    seen: list[str] = []
    url: str | None = "/api/sessions/long/?limit=10"
    pages = 0
    while url is not None:
        body = client.get(url, headers=alice.headers()).json()
        seen = [t["id"] for t in body["turns"]] + seen
        url = body["links"]["older"]
        pages += 1
    assert pages == 3
    assert seen == [str(r.id) for r in turns]


@pytest.mark.django_db
def test_the_newest_page_reads_a_few_index_entries_not_the_session(settings) -> None:
    """The session's newest turns are a backward walk of
    runqueue_run_session_turns_idx: no sort, no scan, and about a page of
    rows read per partition, whatever the session's length."""
    _long_session(3000)
    _long_session(500, session_id="other")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
    # The long session, and the short one whose turns are all older: a walk
    # of the tenant's runs in the list's order (runqueue_run_tenant_idx)
    # would read the long one's 3,000 first.
    for session in ("long", "other"):
        page = sessions.newest_turns("acme", session)[:21]
        sql, params = page.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            document = cursor.fetchone()[0]
        if isinstance(document, str):
            document = json.loads(document)
        nodes = list(_nodes(document[0]["Plan"]))
        kinds = {n["Node Type"] for n in nodes}
        assert "Sort" not in kinds and "Seq Scan" not in kinds, kinds
        scans = [n for n in nodes if "Index Name" in n]
        assert scans, nodes
        read = sum(
            (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n.get("Actual Loops", 1)
            for n in scans
        )
        assert read <= 21 * len(scans), (session, [n["Index Name"] for n in scans], read)


def _nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


# --- the stream ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_stream_follows_every_turn_in_order_and_resumes_across_turns(settings) -> None:
    """A client streams a session while its first turn runs; a second turn
    submitted afterwards (the session idle) shows on the same stream, woken
    by NOTIFY (the poll is a minute). Every event of both turns arrives once,
    in id order, naming its run, the lease's internals hidden from a token.
    Resuming after the first turn's last event sends the second turn's
    events exactly."""
    settings.RUNQUEUE = {"STREAM_POLL_SECONDS": 60, "STREAM_KEEPALIVE_SECONDS": 60}
    alice = make_caller("alice", "acme")
    first = runqueue.submit(kind="k", tenant="acme", session_id="chat").run
    response = Client().get("/api/sessions/chat/stream/", headers=alice.headers())
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream; charset=utf-8"
    received: list[str] = []
    leave = threading.Event()

    def read() -> None:
        try:
            for chunk in response.streaming_content:
                received.append(chunk.decode())
                if leave.is_set():
                    break
        finally:
            response.close()  # a client's disconnect: the stream's places go back

    def got(event: str, run: Run) -> bool:
        return any(
            m["event"] == event and json.loads(m["data"])["run_id"] == str(run.id)
            for m in _messages("".join(received))
        )

    reader = Worker(read, "reader")
    reader.start()
    try:
        wait_until(lambda: got("run.created", first), what="the first turn's replay")
        lease = leases.claim_one("w")
        runtime.build_context(lease).emit("progress", {"turn": 1})
        testing.succeed(lease, {"turn": 1})
        wait_until(lambda: got("run.succeeded", first), timeout=10, what="the first turn's end")

        second = runqueue.submit(kind="k", tenant="acme", session_id="chat").run
        wait_until(lambda: got("run.created", second), timeout=10, what="the new turn")
        lease = leases.claim_one("w")
        runtime.build_context(lease).emit("progress", {"turn": 2})
        testing.succeed(lease, {"turn": 2})
        wait_until(lambda: got("run.succeeded", second), timeout=10, what="the new turn's end")
    finally:
        leave.set()  # the client goes at its next message: a third turn's
        runqueue.submit(kind="k", tenant="acme", session_id="chat", on_busy="enqueue")
        reader.outcome(10)
    assert hub_module.process_hub().open_streams == 0

    both = {str(first.id), str(second.id)}
    messages = [m for m in _messages("".join(received)) if json.loads(m["data"])["run_id"] in both]
    shown = [(json.loads(m["data"])["run_id"], json.loads(m["data"])["id"]) for m in messages]
    expected = [
        (str(run_id), event_id)
        for run_id, event_id in EventLog.objects.filter(run_id__in=[first.id, second.id])
        .order_by("id")
        .values_list("run_id", "id")
    ]
    assert shown == expected
    claimed = [json.loads(m["data"]) for m in messages if m["event"] == "run.claimed"]
    assert len(claimed) == 2 and all("token" not in c["data"] for c in claimed)
    assert all("owner" not in c["data"] for c in claimed)

    # Resume after the first turn's last event: the second turn, exactly.
    settings.RUNQUEUE = {"STREAM_MAX_SECONDS": 0.5, "STREAM_POLL_SECONDS": 0.2}
    cursor = next(
        m["id"]
        for m in messages
        if m["event"] == "run.succeeded" and json.loads(m["data"])["run_id"] == str(first.id)
    )
    again = Client().get(
        "/api/sessions/chat/stream/", headers=alice.headers(**{"Last-Event-ID": cursor})
    )
    resumed = _messages(b"".join(again.streaming_content).decode())
    after_first = EventLog.objects.filter(
        run_id__in=Run.objects.filter(session_id="chat").exclude(id=first.id).values("id")
    )
    assert [json.loads(m["data"])["id"] for m in resumed] == list(
        after_first.order_by("id").values_list("id", flat=True)
    )  # the second turn's events, then the third's (its run.created)
    assert all(m["event"] != "stream.reset" for m in resumed)
    # The same cursor as ?after= resumes alike.
    by_query = Client().get(f"/api/sessions/chat/stream/?after={cursor}", headers=alice.headers())
    assert _messages(b"".join(by_query.streaming_content).decode()) == resumed


@pytest.mark.django_db(transaction=True)
def test_a_fresh_stream_starts_with_the_newest_finished_turn_and_the_live_ones(settings) -> None:
    settings.RUNQUEUE = {"STREAM_MAX_SECONDS": 0.5, "STREAM_POLL_SECONDS": 0.2}
    alice = make_caller("alice", "acme")
    for _ in range(2):
        runqueue.submit(kind="k", tenant="acme", session_id="chat")
        testing.succeed(leases.claim_one("w"))
    newest = Run.objects.filter(session_id="chat").order_by("-created_at").first()
    live = runqueue.submit(kind="k", tenant="acme", session_id="chat").run
    pending = runqueue.submit(kind="k", tenant="acme", session_id="chat", on_busy="enqueue").run
    response = Client().get("/api/sessions/chat/stream/", headers=alice.headers())
    runs = {json.loads(m["data"])["run_id"] for m in _messages(b"".join(response).decode())}
    assert runs == {str(newest.id), str(live.id), str(pending.id)}


@pytest.mark.django_db(transaction=True)
def test_a_cursor_of_another_session_or_history_starts_again_after_a_reset(settings) -> None:
    settings.RUNQUEUE = {"STREAM_MAX_SECONDS": 0.5, "STREAM_POLL_SECONDS": 0.2}
    alice = make_caller("alice", "acme")
    elsewhere = runqueue.submit(kind="k", tenant="acme", session_id="other").run
    runqueue.submit(kind="k", tenant="acme", session_id="chat")
    event = EventLog.objects.filter(run_id=elsewhere.id).first()
    cursor = f"{elsewhere.id.hex}:{event.id}"
    response = Client().get(
        "/api/sessions/chat/stream/", headers=alice.headers(**{"Last-Event-ID": cursor})
    )
    messages = _messages(b"".join(response).decode())
    assert messages[0]["event"] == "stream.reset"
    assert {json.loads(m["data"]).get("run_id") for m in messages[1:]} == {
        str(r.id) for r in Run.objects.filter(session_id="chat")
    }


@pytest.mark.django_db(transaction=True)
def test_session_streams_count_against_the_same_stream_limits(settings) -> None:
    settings.RUNQUEUE = {"STREAM_MAX_PER_TOKEN": 1}
    alice = make_caller("alice", "acme")
    run = runqueue.submit(kind="k", tenant="acme", session_id="chat").run
    first = Client().get("/api/sessions/chat/stream/", headers=alice.headers())
    assert first.status_code == 200
    refused = Client().get(f"/api/runs/{run.id}/stream/", headers=alice.headers())
    assert problem(refused, 429, "stream-limit")["scope"] == "token"
    first.close()
    assert hub_module.process_hub().open_streams == 0


# --- the admin's page ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # each submit its own transaction: its own time
def test_the_admin_session_page_shows_turns_and_the_line_and_needs_view_permission() -> None:
    first = runqueue.submit(kind="test.echo", session_id="conv", payload={"text": "hi"}).run
    second = runqueue.submit(
        kind="test.echo", session_id="conv", on_busy="enqueue", payload={"text": "more"}
    ).run
    stop = runqueue.submit(kind="test.echo", session_id="conv", on_busy="interrupt").run
    url = "/admin/runqueue/run/session/?tenant=default&id=conv"
    viewer = login("viewer", "view_run")
    page = viewer.get(url).content.decode()
    links = [f"/admin/runqueue/run/{r.id}/change/" for r in (first, second, stop)]
    assert all(link in page for link in links)
    assert "cancelled: interrupted" in page
    assert "The active run, then 1 pending turn(s)" in page
    turns = page[page.index("rq-session-turns") :]
    rows = [turns.index(f'<tr><td><a href="{link}">') for link in links]
    assert rows == sorted(rows)
    # Linked from the run page's Session section.
    run_page = viewer.get(f"/admin/runqueue/run/{first.id}/change/").content.decode()
    assert url.replace("&", "&amp;") in run_page
    assert viewer.get("/admin/runqueue/run/session/?tenant=default&id=none").status_code == 404
    nobody = login("nobody")
    assert nobody.get(url).status_code == 403
