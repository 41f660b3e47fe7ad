"""Prometheus metrics: the queue's gauges at the web side's scrape URL and a
worker's counters, each read back with prometheus-client's own parser."""

from __future__ import annotations

import datetime as dt
import http.client
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import runqueue
from runqueue import leases, testing
from runqueue.models import PriorityClass, Run, ToolStatus, Worker
from runqueue.observability import queue_metrics
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.helpers import wait_until
from tests.worker_processes import REPO

INTERACTIVE, ASYNC, MAINTENANCE = PriorityClass

pytestmark = pytest.mark.django_db(transaction=True)


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, parsed by the library, keyed by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _scrape(**headers: str) -> dict[tuple[str, frozenset], float]:
    response = Client().get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return _samples(response.content.decode())


def _runs(samples: dict, cls: str, status: str) -> float:
    return samples[("runqueue_runs", frozenset({"class": cls, "status": status}.items()))]


def _one(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_the_queue_gauges_read_back_with_the_librarys_parser() -> None:
    now = timezone.now()
    waited = runqueue.submit(kind="k", priority=INTERACTIVE).run
    Run.objects.filter(id=waited.id).update(created_at=now - dt.timedelta(hours=1))
    later = runqueue.submit(
        kind="k", priority=INTERACTIVE + 1, scheduled_for=now + dt.timedelta(hours=1)
    ).run
    Run.objects.filter(id=later.id).update(created_at=now - dt.timedelta(hours=2))  # not due
    runqueue.submit(kind="k", priority=INTERACTIVE + 2)
    for _ in range(4):
        runqueue.submit(kind="k", priority=ASYNC)
    runqueue.submit(kind="k", priority=MAINTENANCE)
    running = leases.claim_one("w", [ASYNC])
    waiting = leases.claim_one("w", [ASYNC])
    assert leases.wait_for_user(waiting, {"q": "?"})
    for _ in range(2):
        failed = leases.claim_one("w", [ASYNC])
        assert testing.fail(failed, leases.failure_record(None, classification="x", attempt=1))
    pay = leases.claim_one("w", [MAINTENANCE])
    assert leases.record_tool_started(pay, seq=0, tool="charge", idempotency="x", arguments={})
    assert leases.record_tool_outcome(pay, seq=0, status=ToolStatus.UNCERTAIN)
    Worker.objects.create(id="live", hostname="h", pid=1)
    Worker.objects.create(id="gone", hostname="h", pid=2, stopped_at=now)

    samples = _scrape()
    assert _runs(samples, "interactive", "queued") == 3
    assert _runs(samples, "async", "queued") == 0
    assert _runs(samples, "async", "running") == 1
    assert _runs(samples, "async", "waiting_for_user") == 1
    assert _runs(samples, "maintenance", "running") == 1
    assert _runs(samples, "maintenance", "queued") == 0
    assert _runs(samples, "interactive", "running") == 0
    assert 3600 <= _one(samples, "runqueue_oldest_due_seconds", **{"class": "interactive"}) < 3700
    assert _one(samples, "runqueue_oldest_due_seconds", **{"class": "async"}) == 0
    assert _one(samples, "runqueue_dead_lettered_runs") == 2
    assert _one(samples, "runqueue_uncertain_tool_invocations") == 1
    assert _one(samples, "runqueue_uncertain_runs") == 1
    assert _one(samples, "runqueue_live_workers") == 1
    assert running.run_id  # still running


def test_a_count_past_the_cap_is_the_planners_estimate(monkeypatch) -> None:
    monkeypatch.setattr(queue_metrics, "CAP", 5)
    for _ in range(40):
        runqueue.submit(kind="k", priority=ASYNC)
    for _ in range(3):
        runqueue.submit(kind="k", priority=INTERACTIVE)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
    samples = _scrape()
    assert _runs(samples, "interactive", "queued") == 3  # under the cap: exact
    estimate = _runs(samples, "async", "queued")
    assert 6 <= estimate <= 80, estimate  # past it: never below cap + 1


def test_the_scrape_url_asks_for_the_token_when_one_is_set(settings) -> None:
    settings.RUNQUEUE = {"METRICS_TOKEN": "s3cret-metrics-token"}
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"] == 'Bearer realm="runqueue-metrics"'
    samples = _scrape(Authorization="Bearer s3cret-metrics-token")
    assert ("runqueue_live_workers", frozenset()) in samples


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_workers_counters_and_histograms(fast_retry) -> None:
    """A burst pool: claims, finishes by outcome, an uncertain tool outcome,
    latency and duration observations, each in the run's class."""
    cls = {"class": "interactive"}
    before = {
        "claims": _value("runqueue_worker_claims_total", **cls),
        "succeeded": _value("runqueue_worker_finishes_total", **cls, outcome="succeeded"),
        "failed": _value("runqueue_worker_finishes_total", **cls, outcome="failed"),
        "uncertain": _value("runqueue_worker_uncertain_tool_outcomes_total", **cls),
        "latency": _value("runqueue_worker_claim_latency_seconds_count", **cls),
        "duration": _value("runqueue_worker_run_duration_seconds_count", **cls),
        "fenced": _value("runqueue_worker_fenced_writes_total", **{"class": "async"}),
    }
    for _ in range(3):
        runqueue.submit(kind="k")
    runqueue.submit(kind="test.fail", payload={"error": "permanent"})
    runqueue.submit(kind="test.pay")
    config = PoolConfig(slots=(SlotSpec.parse("interactive=2"),), burst=True, worker_id="m1")
    assert Pool(config).run() == 0

    assert _value("runqueue_worker_claims_total", **cls) - before["claims"] == 5
    succeeded = _value("runqueue_worker_finishes_total", **cls, outcome="succeeded")
    assert succeeded - before["succeeded"] == 4
    failed = _value("runqueue_worker_finishes_total", **cls, outcome="failed")
    assert failed - before["failed"] == 1
    uncertain = _value("runqueue_worker_uncertain_tool_outcomes_total", **cls)
    assert uncertain - before["uncertain"] == 1
    latency = _value("runqueue_worker_claim_latency_seconds_count", **cls)
    assert latency - before["latency"] == 5
    duration = _value("runqueue_worker_run_duration_seconds_count", **cls)
    assert duration - before["duration"] == 5

    runqueue.submit(kind="k", priority=ASYNC)
    lease = leases.claim_one("w", [ASYNC])
    runqueue.cancel(lease.run_id, reason="test", actor="t")
    assert not leases.heartbeat(lease) and lease.fenced
    fenced = _value("runqueue_worker_fenced_writes_total", **{"class": "async"})
    assert fenced - before["fenced"] == 1


@pytest.fixture
def worker_with_metrics(start_worker) -> Iterator[tuple[int, object]]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker = start_worker(
        "--slots",
        "interactive=1",
        "--worker-id",
        "metrics-worker",
        "--metrics-port",
        str(port),
        "--metrics-host",
        "127.0.0.1",
    )
    yield port, worker


def test_runworker_serves_its_metrics_on_a_port(worker_with_metrics) -> None:
    port, worker = worker_with_metrics
    run = runqueue.submit(kind="k").run

    def scrape() -> dict | None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            return _samples(conn.getresponse().read().decode())
        except OSError:
            assert worker.proc.poll() is None, worker.output()
            return None

    def finished() -> dict | None:
        samples = scrape()
        key = (
            "runqueue_worker_finishes_total",
            frozenset({"class": "interactive", "outcome": "succeeded"}.items()),
        )
        return samples if samples and samples.get(key) == 1 else None

    samples = wait_until(finished, timeout=60, what="the worker's metrics")
    assert _one(samples, "runqueue_worker_claims_total", **{"class": "interactive"}) == 1
    assert _one(samples, "runqueue_worker_info", worker_id="metrics-worker") == 1
    assert ("process_cpu_seconds_total", frozenset()) in samples  # the process collector
    assert Run.objects.get(id=run.id).status == "succeeded"


def test_runworker_refuses_a_bad_metrics_port() -> None:
    proc = subprocess.run(
        [sys.executable, "manage.py", "runworker", "--metrics-port", "70000"],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "expected a TCP port (1-65535), got '70000'" in proc.stderr


def test_a_sessions_pending_turns_are_a_status_of_the_runs_gauge() -> None:
    runqueue.submit(kind="k", session_id="chat-1", priority=ASYNC)
    for _ in range(3):
        runqueue.submit(kind="k", session_id="chat-1", priority=ASYNC, on_busy="enqueue")
    samples = _scrape()
    assert _runs(samples, "async", "queued") == 1
    assert _runs(samples, "async", "pending") == 3
    assert _runs(samples, "interactive", "pending") == 0
