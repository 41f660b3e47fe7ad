"""gunicorn serving the deployable project (``config.wsgi``, one process)
on the test database, for the tests that stream over real HTTP."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from django.db import connection

from tests.helpers import wait_until
from tools.topology import free_port, stop

REPO = Path(__file__).resolve().parents[2]


def serve(log_path: Path, settings: dict, streams: int) -> Iterator[int]:
    """Start gunicorn with these RUNQUEUE settings and ``streams`` stream
    places; yield its port once it answers; stop it."""
    db = connection.settings_dict
    database = {k: db[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT")}
    port = free_port()
    env = dict(os.environ) | {
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "RUNQUEUE_TEST_DATABASE": json.dumps(database),
        "RUNQUEUE_TEST_SETTINGS": json.dumps(settings),
        "RUNQUEUE_STREAMS_PER_PROCESS": str(streams),
        "GUNICORN_REQUEST_THREADS": "2",
        "WEB_CONCURRENCY": "1",
    }
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn_conf.py", "config.wsgi"]
            + ["--bind", f"127.0.0.1:{port}"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

        def up() -> bool:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/api/openapi.json")
                return conn.getresponse().status == 200
            except OSError:
                assert proc.poll() is None, log_path.read_text()
                return False

        try:
            wait_until(up, timeout=60, what="gunicorn to answer")
            yield port
        finally:
            stop(proc)
