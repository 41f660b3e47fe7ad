"""Structured logs: the worker's per-run lines carry their fields, and
RUNQUEUE_LOG_FORMAT=json makes the deployable project write one JSON object
per line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest
from django.db import connection

import runqueue
from runqueue.observability.logfmt import JsonFormatter
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.worker_processes import REPO

pytestmark = pytest.mark.django_db(transaction=True)


def _burst_lines(level: int, worker_id: str) -> tuple[list[dict], str]:
    """What a burst worker's runqueue.worker logger writes at ``level``, as JSON lines."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    worker_logger = logging.getLogger("runqueue.worker")
    worker_logger.addHandler(handler)
    before = worker_logger.level
    worker_logger.setLevel(level)
    try:
        config = PoolConfig(slots=(SlotSpec.parse("async=1"),), burst=True, worker_id=worker_id)
        assert Pool(config).run() == 0
    finally:
        worker_logger.removeHandler(handler)
        worker_logger.setLevel(before)
    return [json.loads(line) for line in out.getvalue().splitlines()], out.getvalue()


def test_the_workers_per_run_lines_carry_structured_fields() -> None:
    run = runqueue.submit(kind="k", priority=12).run
    lines, _text = _burst_lines(logging.DEBUG, "log1")
    per_run = {line["message"].split(" run ")[0]: line for line in lines if "run_id" in line}
    claimed, finished = per_run["Claimed"], per_run["Finished"]
    for line in (claimed, finished):
        assert line["run_id"] == str(run.id)
        assert line["kind"] == "k"
        assert line["class"] == "async"
        assert line["epoch"] == 1
        assert line["attempt"] == 1
        assert line["logger"] == "runqueue.worker" and line["level"] == "DEBUG"
    assert finished["outcome"] == "succeeded"
    assert isinstance(finished["duration_ms"], int)
    assert isinstance(claimed["wait_ms"], int)
    assert claimed["message"].startswith(f"Claimed run id={run.id} kind=k class=async epoch=1")


def test_at_info_only_runs_that_did_not_succeed_are_logged() -> None:
    ok = runqueue.submit(kind="k", priority=12).run
    bad = runqueue.submit(kind="test.fail", payload={"error": "permanent"}, priority=12).run
    lines, text = _burst_lines(logging.INFO, "log2")
    per_run = [
        (line["message"].split(" run ")[0], line["run_id"]) for line in lines if "run_id" in line
    ]
    assert per_run == [("Finished", str(bad.id))], lines
    assert str(ok.id) not in text


def test_json_lines_keep_exceptions_on_one_line() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom %s", ("now",), None)
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        record.exc_info = sys.exc_info()
    text = JsonFormatter().format(record)
    assert "\n" not in text
    body = json.loads(text)
    assert body["message"] == "boom now"
    assert "ValueError: bad\nvalue" in body["exception"]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    db = connection.settings_dict
    database = {k: db[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=dict(os.environ)
        | {
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "RUNQUEUE_TEST_DATABASE": json.dumps(database),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_runqueue_log_format_json_switches_the_project_to_json_lines() -> None:
    run = runqueue.submit(kind="test.fail", payload={"error": "permanent"}).run
    proc = _manage("runworker", "--burst", "--slots", "interactive=1", RUNQUEUE_LOG_FORMAT="json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (proc.stdout + proc.stderr).splitlines() if line]
    assert lines, "the worker logged nothing"
    [finished] = [line for line in lines if line.get("message", "").startswith("Finished run")]
    assert finished["run_id"] == str(run.id)
    assert (finished["kind"], finished["class"], finished["outcome"]) == (
        "test.fail",
        "interactive",
        "failed",
    )
    assert finished["epoch"] == 1


def test_an_unknown_log_format_is_refused() -> None:
    proc = _manage("check", RUNQUEUE_LOG_FORMAT="xml")
    assert proc.returncode != 0
    assert "RUNQUEUE_LOG_FORMAT must be plain or json, got 'xml'" in proc.stderr
