"""Start real ``manage.py runworker`` processes against the test database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection, connections

from tests.pooling import DIRECT, POOLED_RUNQUEUE, POOLER

REPO = Path(__file__).resolve().parent.parent


class WorkerProcess:
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.worker_id = args[args.index("--worker-id") + 1] if "--worker-id" in args else None
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", *args],
            cwd=REPO,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(30)
        self._out.close()


@pytest.fixture
def start_worker(transactional_db, empty_ledger, tmp_path) -> Iterator:
    """``start_worker("--slots", "async=1", settings={...})`` -> WorkerProcess."""
    # In the pooled mode (tests/pooling.py) "default" is the pooler: the
    # workers reach the server as "direct" and go through it by default.
    pooled_through = {
        "HOST": connection.settings_dict["HOST"],
        "PORT": connection.settings_dict["PORT"],
    }
    db = connections[DIRECT].settings_dict if POOLER else connection.settings_dict
    database = {
        "ENGINE": db["ENGINE"],
        "NAME": db["NAME"],
        "USER": db["USER"],
        "PASSWORD": db["PASSWORD"],
        "HOST": db["HOST"],
        "PORT": db["PORT"],
    }
    started: list[WorkerProcess] = []

    def start(
        *args: str,
        settings: dict | None = None,
        through: dict | None = None,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """``through``: HOST/PORT (and OPTIONS) the worker's default database
        is reached by instead (a pooler); the test database itself is then
        the worker's "direct" alias, for RUNQUEUE["LISTEN_DATABASE"].
        ``env``: more environment (LD_PRELOAD for libfaketime). In the
        pooled mode a worker with no ``through`` of its own goes through the
        test run's pooler, with POOLER and LISTEN_DATABASE set (the test's
        settings win)."""
        if POOLER and through is None:
            through = pooled_through
            settings = POOLED_RUNQUEUE | (settings or {})
        env = dict(os.environ) | (env or {})
        env |= {
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "RUNQUEUE_TEST_DATABASE": json.dumps(database | (through or {})),
            "RUNQUEUE_TEST_DIRECT_DATABASE": json.dumps(database),
            "RUNQUEUE_TEST_SETTINGS": json.dumps(settings or {}),
            "PYTHONUNBUFFERED": "1",
        }
        worker = WorkerProcess(list(args), env, tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
