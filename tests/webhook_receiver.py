"""A local webhook receiver for the tests: an HTTP server on 127.0.0.1 in a
thread that records what it gets, dedupes on ``webhook-id`` as a receiver
should, and can be told to fail, hang past the client's timeout or answer
slowly; and an independent check of a Standard Webhooks signature."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def message_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """What the server does (``plan``: a list of actions taken in order,
    then ``then`` for every later request) and what it saw."""

    url: str = ""
    plan: list[str] = field(default_factory=list)
    then: str = "ok"
    retry_after: str | None = None
    requests: list[Received] = field(default_factory=list)
    processed: dict[str, Received] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_action(self) -> str:
        with self.lock:
            return self.plan.pop(0) if self.plan else self.then

    def ids(self) -> list[str]:
        with self.lock:
            return [r.message_id for r in self.requests]


def _handler(receiver: Receiver) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            length = int(self.headers.get("Content-Length", "0"))
            got = Received(
                self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
            )
            action = receiver.next_action()
            with receiver.lock:
                receiver.requests.append(got)
            if action == "hang":
                # Past the client's timeout: it gives up; released at teardown.
                receiver.release.wait(10)
                return
            if action == "slow":
                receiver.release.wait(0.3)
            if action == "redirect":
                self.send_response(302)
                self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.end_headers()
                return
            status = 200 if action in ("ok", "slow") else int(action)
            if status < 300:
                with receiver.lock:
                    receiver.processed.setdefault(got.message_id, got)
            self.send_response(status)
            if status >= 400 and receiver.retry_after is not None:
                self.send_header("Retry-After", receiver.retry_after)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no" if status >= 300 else b"ok")

    return Handler


@contextmanager
def receiving(**options: Any) -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 for the block's duration."""
    receiver = Receiver(**options)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def signature_valid(secret: str, received: Received) -> bool:
    """The Standard Webhooks check written out, without its library:
    HMAC-SHA256 over ``id.timestamp.body`` with the base64-decoded secret,
    compared with each ``v1`` signature of the header."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = b".".join(
        [
            received.message_id.encode(),
            received.headers["webhook-timestamp"].encode(),
            received.body,
        ]
    )
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for part in received.headers["webhook-signature"].split(" "):
        version, _, value = part.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return True
    return False
