"""Every background service a runworker runs beside its slots, declared once:
its name, what it does, where it runs, the interval and settings it reads,
and when it is on. The pool builds and starts them from ``SERVICES``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from runqueue import leases, schedules
from runqueue.capacity import budgets, concurrency
from runqueue.conf import get_settings
from runqueue.history import housekeeping
from runqueue.observability import metrics
from runqueue.worker.config import PoolConfig
from runqueue.worker.deadlines import Deadlines
from runqueue.worker.listener import Listener
from runqueue.worker.services import Service

#: Where a service runs. heartbeat: the heartbeat thread, until every lease
#: is given back; maintenance: the maintenance thread, one tick at a time,
#: until the pool stops claiming; thread: a thread of its own, until the
#: pool stops claiming; server: a daemon thread started before the worker
#: registers (a bad port stops the worker before it claims anything).
RunsOn = Literal["heartbeat", "maintenance", "thread", "server"]


class Host(Protocol):
    """What the services need of the pool that runs them."""

    config: PoolConfig
    stopping: threading.Event

    def renew_leases(self) -> None: ...

    def report_seen(self) -> None: ...

    def wake(self, payload: str) -> None: ...

    def warm_wake_claims(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundService:
    """One background service of a worker and its configuration."""

    name: str
    doc: str
    runs_on: RunsOn
    #: The PoolConfig field holding its interval in seconds (periodic ones).
    interval: str | None = None
    #: The RUNQUEUE settings (and runworker options) it reads.
    reads: tuple[str, ...] = ()
    #: With ``--burst``: runs as usual, ticks once at start, or is off.
    burst: Literal["run", "once", "off"] = "off"
    #: A PoolConfig field that must be set for it to run (None: always on).
    needs: str | None = None
    #: Periodic ones: the tick, given the pool.
    tick: Callable[[Host], Callable[[], object]] | None = None
    #: The others: starts it, given the pool; returns its thread or server.
    start: Callable[[Host], object] | None = None

    def enabled(self, config: PoolConfig) -> bool:
        """This service runs (all the time) in a pool with ``config``."""
        if self.needs is not None and getattr(config, self.needs) is None:
            return False
        return not config.burst or self.burst == "run"


def _started[T: threading.Thread](thread: T) -> T:
    thread.start()
    return thread


def _each_sweep(
    name: str,
    doc: str,
    tick: Callable[[Host], Callable[[], object]],
    *,
    reads: tuple[str, ...] = (),
    burst: Literal["run", "once", "off"] = "off",
) -> BackgroundService:
    """A maintenance service ticking every ``sweep_seconds``
    (``SWEEP_SECONDS``); ``reads``: the other settings it reads."""
    return BackgroundService(
        name=name,
        doc=doc,
        runs_on="maintenance",
        interval="sweep_seconds",
        reads=("SWEEP_SECONDS", *reads),
        burst=burst,
        tick=tick,
    )


SERVICES: tuple[BackgroundService, ...] = (
    BackgroundService(
        name="heartbeat",
        doc="renews every lease the worker holds in one statement; reports handlers that "
        "ignore a cancellation",
        runs_on="heartbeat",
        interval="heartbeat_seconds",
        reads=("HEARTBEAT_SECONDS", "--heartbeat-seconds"),
        burst="run",
        tick=lambda pool: pool.renew_leases,
    ),
    BackgroundService(
        name="listener",
        doc="LISTENs for NOTIFY: wakes the slot groups a submit names, stops a cancelled "
        "run's handler",
        runs_on="thread",
        reads=("NOTIFY_CHANNEL", "LISTEN_DATABASE"),
        start=lambda pool: _started(
            Listener(
                get_settings().NOTIFY_CHANNEL, pool.wake, pool.stopping, pool.warm_wake_claims
            )
        ),
    ),
    _each_sweep(
        "sweeper",
        "requeues or dead-letters the runs whose lease expired",
        lambda pool: leases.sweep,
        reads=("--sweep-seconds",),
        burst="once",
    ),
    # Every worker may fire a due tick; each fires once.
    _each_sweep(
        "schedule-ticker",
        "submits the runs of the schedules that are due",
        lambda pool: schedules.tick,
        reads=("SCHEDULES",),
    ),
    _each_sweep(
        "caps-refresh",
        "re-reads the concurrency limits",
        lambda pool: concurrency.refresh,
        reads=("CONCURRENCY",),
    ),
    _each_sweep(
        "budgets-refresh", "re-reads the budgets", lambda pool: budgets.refresh, reads=("BUDGETS",)
    ),
    _each_sweep(
        "worker-row",
        "the Worker row's last_seen_at (the admin tells live workers by it) and the "
        "slots cancelled runs hold",
        lambda pool: pool.report_seen,
    ),
    BackgroundService(
        name="housekeeping",
        doc="makes the days ahead, summarizes the days' BRIN indexes and submits the "
        "housekeeping runs (retention: old terminal runs, finished runs' signals)",
        runs_on="maintenance",
        interval="housekeeping_seconds",
        reads=("TERMINAL_RUN_RETENTION_SECONDS",),
        tick=lambda pool: housekeeping.schedule,
    ),
    BackgroundService(
        name="deadlines",
        doc="resumes due waits and expires runs not started in time",
        runs_on="thread",
        start=lambda pool: _started(Deadlines(pool.stopping)),
    ),
    BackgroundService(
        name="metrics",
        doc="serves this worker's Prometheus metrics over HTTP (path /metrics)",
        runs_on="server",
        reads=("--metrics-port", "--metrics-host"),
        burst="run",
        needs="metrics_port",
        start=lambda pool: metrics.serve(
            pool.config.metrics_port or 0, pool.config.metrics_host, pool.config.worker_id
        ),
    ),
)


def periodic(pool: Host, runs_on: RunsOn) -> tuple[Service, ...]:
    """The periodic services that run on ``runs_on``'s thread, bound to ``pool``."""
    return tuple(
        Service(s.name, getattr(pool.config, s.interval), s.tick(pool))
        for s in SERVICES
        if s.runs_on == runs_on and s.interval is not None and s.tick is not None
    )
