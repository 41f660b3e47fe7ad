"""Request bodies at the edges: chunked (read, bounded, or 411), and an
integer too long to convert (its own message, not "not valid JSON")."""

from __future__ import annotations

import http.client
import io
import json
import socket

import pytest
from django.test import RequestFactory

from runqueue.api import runs
from runqueue.api.parsing import MAX_DIGITS
from tests.api_helpers import RUNS, make_caller, problem, submit
from tests.topologies.test_stream_gunicorn import gunicorn  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _chunked_post(port: int, raw: str, chunks: list[bytes]) -> tuple[int, dict]:
    """POST with Transfer-Encoding: chunked; the server may answer before it
    has read every chunk (a 413), so a refused send still reads the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        f"POST {RUNS} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {raw}\r\n"
        "Content-Type: application/json\r\nIdempotency-Key: chunked-1\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    try:
        sock.sendall(head.encode())
        for chunk in chunks:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server answered and closed first
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = json.loads(response.read())
    sock.close()
    return response.status, body


def test_a_chunked_body_is_read_and_bounded_through_gunicorn(gunicorn) -> None:  # noqa: F811
    """Issue 26: any chunked POST got 400 "not valid UTF-8 JSON", even valid
    JSON, and a 10 MB one too instead of 413."""
    alice = make_caller("alice", "acme")
    text = json.dumps({"kind": "not.listed", "payload": {"a": 1}}).encode()
    status, body = _chunked_post(gunicorn, alice.raw, [text[:10], text[10:]])
    # Parsed: the kind is what is refused (the project's API_KINDS are empty here).
    assert (status, body["type"]) == (422, "urn:runqueue:problem:kind-not-allowed"), body
    status, body = _chunked_post(gunicorn, alice.raw, [b"[" + b"1," * 65536] * 80 + [b"1]"])
    assert (status, body["type"]) == (413, "urn:runqueue:problem:payload-too-large"), body


def test_a_chunked_body_the_server_does_not_end_is_411() -> None:
    alice = make_caller("alice", "acme")
    request = RequestFactory().post(
        RUNS, data="{}", content_type="application/json", headers=alice.headers("k")
    )
    del request.META["CONTENT_LENGTH"]
    request.META["HTTP_TRANSFER_ENCODING"] = "chunked"
    request.META["wsgi.input"] = io.BytesIO(b'{"kind": "k"}')
    problem(runs.submit_run(request), 411, "length-required")


def test_a_too_long_integer_gets_its_own_message(client) -> None:
    alice = make_caller("alice", "acme")
    raw = '{"kind": "k", "payload": {"n": ' + "9" * 5000 + "}}"
    body = problem(submit(client, alice, None, raw_body=raw), 400, "malformed-json")
    assert body["detail"] == (
        f"A number in the request body has 5000 digits; at most {MAX_DIGITS} are read."
    )
    negative = raw.replace(": 9", ": -9")
    assert (
        "5000 digits"
        in problem(submit(client, alice, None, raw_body=negative), 400, "malformed-json")["detail"]
    )
