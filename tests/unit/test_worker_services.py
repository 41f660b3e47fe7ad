"""The worker's background services: declared once (their name, where they
run, the interval and settings they read, when they are on), each on its
own clock, a failing one logged by name without
holding back the others; and the outcomes a worker reports, one enum."""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import OperationalError

from runqueue.conf.table import BY_NAME
from runqueue.leases.outcomes import Reported
from runqueue.management.commands.runworker import Command
from runqueue.models import PriorityClass
from runqueue.observability import metrics
from runqueue.worker import background
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.services import Periodic, Service
from tests.helpers import wait_until


def test_the_pool_declares_its_services_by_name() -> None:
    pool = Pool(PoolConfig(worker_id="services-test", sweep_seconds=7, housekeeping_seconds=90))
    assert [(s.name, s.every) for s in pool.maintenance_services] == [
        ("sweeper", 7),
        ("schedule-ticker", 7),
        ("caps-refresh", 7),
        ("budgets-refresh", 7),
        ("worker-row", 7),
        ("housekeeping", 90),
    ]
    assert [s.name for s in pool.heartbeat_services] == ["heartbeat"]


def test_each_service_is_declared_once_with_what_it_reads() -> None:
    """Every interval is a PoolConfig field, every setting a RUNQUEUE key
    and every option one runworker takes."""
    names = [s.name for s in background.SERVICES]
    assert len(names) == len(set(names))
    fields = set(PoolConfig.__dataclass_fields__)
    parser = Command().create_parser("manage.py", "runworker")
    options = {option for action in parser._actions for option in action.option_strings}
    for service in background.SERVICES:
        assert service.doc, service.name
        periodic = service.runs_on in ("heartbeat", "maintenance")
        assert (service.interval in fields) if periodic else service.interval is None
        assert (service.tick is not None) == periodic, service.name
        assert (service.start is None) == periodic, service.name
        assert service.needs is None or service.needs in fields
        for read in service.reads:
            assert read in options if read.startswith("--") else read in BY_NAME, read


def test_which_services_run_follows_their_declaration() -> None:
    def running(**config: object) -> set[str]:
        pool_config = PoolConfig(worker_id="services-test", **config)  # type: ignore[arg-type]
        return {s.name for s in background.SERVICES if s.enabled(pool_config)}

    everything = {s.name for s in background.SERVICES}
    assert running() == everything - {"metrics"}
    assert running(metrics_port=9100) == everything
    assert running(burst=True) == {"heartbeat"}
    once = [s.name for s in background.SERVICES if s.burst == "once"]
    assert once == ["sweeper"]  # a burst worker sweeps once at start


def test_each_service_ticks_on_its_own_clock_and_a_failing_one_holds_back_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> None:
        raise OperationalError("server closed the connection")

    stop = threading.Event()
    fast = Service("fast", 0.01, lambda: None, jitter=0)
    slow = Service("slow", 3600, lambda: None, jitter=0)
    runner = Periodic(
        "test-services", (Service("broken", 0.01, broken, jitter=0), fast, slow), stop
    )
    caplog.set_level(logging.WARNING, logger="runqueue.worker")
    runner.start()
    try:
        wait_until(lambda: runner.ticks["fast"] >= 5, what="the fast service's ticks")
        wait_until(lambda: runner.ticks["broken"] >= 5, what="the broken service's ticks")
        assert runner.ticks["slow"] == 1  # once at start, then not for an hour
    finally:
        stop.set()
        runner.join(10)
    assert not runner.is_alive()
    assert any(r.getMessage().startswith("broken: connection lost") for r in caplog.records)


def test_a_periodic_runner_needs_a_service() -> None:
    with pytest.raises(ValueError, match="no services"):
        Periodic("empty", (), threading.Event())


def test_the_metrics_count_every_outcome_a_worker_reports() -> None:
    assert metrics.OUTCOMES == tuple(Reported)
    assert "given_back" in metrics.OUTCOMES
    before = metrics.FINISHES.labels("async", "given_back")._value.get()
    metrics.finished(int(PriorityClass.ASYNC), Reported.GIVEN_BACK, None)
    assert metrics.FINISHES.labels("async", "given_back")._value.get() == before + 1
