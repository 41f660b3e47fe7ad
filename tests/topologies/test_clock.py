"""Hosts whose clocks differ from the database's: every time runqueue writes
or compares comes from the database, so a worker host or a web host that is
minutes off changes nothing anyone sees.

The host's clock is moved here by replacing ``django.utils.timezone.now``
(what Python code reads for "now") with one that is off by an hour; the
database's clock is left alone. (The libfaketime test of whole worker
processes is in the topology suite.)
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.contrib import admin
from django.utils import timezone

import runqueue
from runqueue import leases
from runqueue.db import db_now
from runqueue.models import (
    Idempotency,
    IdempotencyKey,
    Run,
    RunStatus,
    ToolInvocation,
    ToolStatus,
    Worker,
)
from runqueue.worker.pool import Pool, PoolConfig, SlotSpec
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

OFF = dt.timedelta(hours=1)


@pytest.fixture(params=[-OFF, OFF], ids=["host-behind", "host-ahead"])
def skewed(request, monkeypatch) -> dt.timedelta:
    """The host's clock, off the database's by an hour either way."""
    real = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + request.param)
    return request.param


def _close_to_db(value: dt.datetime, slack: float = 30.0) -> bool:
    return abs((db_now() - value).total_seconds()) < slack


def test_a_worker_on_a_skewed_host_reports_the_database_time_and_shows_live(skewed) -> None:
    pool = Pool(
        PoolConfig(
            slots=(SlotSpec.parse("interactive=1"),),
            worker_id="skewed-host",
            lease_seconds=30,
            heartbeat_seconds=5,
            grace_seconds=1,
            poll_seconds=5,
        )
    )
    pool._register()
    pool.report_seen()
    worker = Worker.objects.get(id="skewed-host")
    assert _close_to_db(worker.started_at) and _close_to_db(worker.last_seen_at)
    # The admin, on a host skewed the same way, reads liveness off the
    # database's clock too.
    model_admin = admin.site._registry[Worker]
    shown = model_admin.get_queryset(None).get(id="skewed-host")
    assert model_admin.live(shown) is True
    assert model_admin.last_seen(shown) == "0\xa0minutes ago"


def test_a_tool_record_on_a_skewed_host_never_runs_backwards(skewed) -> None:
    runqueue.submit(kind="agent.turn")
    lease = leases.claim_one("skewed-worker", lease_seconds=30)
    assert lease is not None
    assert leases.record_tool_started(
        lease, seq=0, tool="t", idempotency=Idempotency.NON_IDEMPOTENT, arguments={}
    )
    assert leases.record_tool_outcome(lease, seq=0, status=ToolStatus.COMPLETED, result=1)
    tool = ToolInvocation.objects.get(run_id=lease.run_id, seq=0)
    assert tool.finished_at >= tool.created_at
    assert _close_to_db(tool.finished_at)


def test_a_cancel_on_a_skewed_host_marks_interrupted_tools_with_the_database_time(
    skewed,
) -> None:
    run = runqueue.submit(kind="agent.turn").run
    lease = leases.claim_one("skewed-worker", lease_seconds=30)
    assert lease is not None
    assert leases.record_tool_started(
        lease, seq=0, tool="t", idempotency=Idempotency.NON_IDEMPOTENT, arguments={}
    )
    runqueue.cancel(run.id, reason="test", actor="test")
    tool = ToolInvocation.objects.get(run_id=run.id, seq=0)
    assert tool.status == ToolStatus.UNCERTAIN
    assert tool.finished_at >= tool.created_at and _close_to_db(tool.finished_at)


def test_an_idempotency_key_expires_by_the_database_clock(settings, monkeypatch) -> None:
    settings.RUNQUEUE = {"IDEMPOTENCY_KEY_RETENTION_SECONDS": 600}
    first = runqueue.submit(kind="agent.turn", idempotency_key="k-1")
    key = IdempotencyKey.objects.get(key="k-1")
    assert _close_to_db(key.expires_at - dt.timedelta(seconds=600))
    # A web host an hour ahead still replays the key the database holds.
    real = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + OFF)
    again = runqueue.submit(kind="agent.turn", idempotency_key="k-1")
    assert again.outcome == "replayed" and again.run.id == first.run.id


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="libfaketime is not installed (.ci/run does)")
def test_workers_on_hosts_90s_ahead_and_behind_agree_with_the_database(start_worker) -> None:
    """Two real worker processes under libfaketime, one 90 s ahead of the
    database and one 90 s behind: both show live, every run finishes, and
    every time they wrote is the database's."""
    workers = {
        offset: start_worker(
            "--slots",
            "interactive=2",
            "--worker-id",
            f"faked{offset:+d}",
            env={"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"{offset:+d}s"},
        )
        for offset in (90, -90)
    }
    runs = [runqueue.submit(kind="test.host_time").run.id for _ in range(20)]
    wait_until(
        lambda: Run.objects.filter(id__in=runs, status=RunStatus.SUCCEEDED).count() == len(runs),
        timeout=120,
        what="every run to succeed",
    )
    now = db_now()
    offsets = {
        round(run.result["host_time"] - now.timestamp(), -1)
        for run in Run.objects.filter(id__in=runs)
    }
    assert offsets <= {90.0, -90.0, 80.0, -80.0}  # the hosts' clocks were off
    model_admin = admin.site._registry[Worker]
    for offset, process in workers.items():
        wait_until(
            lambda o=offset: Worker.objects.filter(id=f"faked{o:+d}").exists(),
            what="the worker's row",
        )
        row = model_admin.get_queryset(None).get(id=f"faked{offset:+d}")
        assert model_admin.live(row), (offset, row.last_seen_at, now, process.output())
        assert _close_to_db(row.started_at, slack=60) and _close_to_db(row.last_seen_at)
    for tool in ToolInvocation.objects.filter(run_id__in=runs):
        assert tool.finished_at >= tool.created_at and _close_to_db(tool.finished_at, slack=60)
    for run in Run.objects.filter(id__in=runs):
        assert run.created_at <= run.started_at <= run.finished_at
