"""runqueue's headline drains: ``manage.py runworker`` processes, started and
idle (LISTENing) before the runs are loaded, so start-up is not measured.

Only what runqueue exposes is read: the run rows (first claim to last
finish), the database's commit counter (``measure.CommitWindow``) and the
worker processes' CPU (``/proc/<pid>/stat``).

Each shape (1 slot, W slots, P processes) drains in a copy of the migrated
bench database, with workers of its own. They all start together, idle for a
moment, and are then paused (SIGSTOP): PostgreSQL reports an idle backend's
commits 10 s after it went idle, so after ``settle`` seconds paused every
commit of their start-up has been reported, whatever the pool does when idle,
and the count starts exact. The bench takes its other figures meanwhile. A
shape's workers are resumed just before its load; the moment its last run
has finished their CPU is read and they are stopped with SIGTERM (never
straight after a SIGCONT: the kernel can then hand the signal to a thread
other than the main one, which waits without a timeout and never sees it).
The count ends once their connections have exited (an exiting backend
reports its commits), so it includes their shutdown.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

from tools.bench import common, measure, rq_db

REPO = Path(__file__).resolve().parents[2]
CPU_SOURCE = "utime+stime of the runworker processes (/proc/<pid>/stat)"
#: None of the bench's runs queued or running: two partial-index probes, cheap at
#: every size (a worker queues its own maintenance runs, which async slots leave).
DONE = (
    "SELECT NOT EXISTS"
    " (SELECT 1 FROM runqueue_run WHERE status = 'queued' AND kind = 'bench.noop')"
    " AND NOT EXISTS"
    " (SELECT 1 FROM runqueue_run WHERE status = 'running' AND kind = 'bench.noop')"
)
#: Seconds the workers run idle (first claims made, LISTEN up) before the pause.
IDLE_SECONDS = 2.0
#: Seconds paused before a count may start: PostgreSQL 15 reports an idle
#: backend's commits 10 s after it went idle (PGSTAT_IDLE_INTERVAL).
SETTLE_SECONDS = 10.5


class Workers:
    """``processes`` runworker processes of ``slots`` async slots each."""

    def __init__(
        self,
        url: str,
        processes: int,
        slots: int,
        label: str,
        env: dict[str, str] | None = None,
        spec: tuple[str, ...] = (),
        args: tuple[str, ...] = (),
    ) -> None:
        """``spec``: the ``--slots`` values instead of ``async=<slots>``;
        ``args``: more runworker options, and BENCH_RUNWORKER_ARGS's (e.g.
        "--claim-lanes 1", to compare a setting within one block)."""
        slot_args = [a for value in spec or (f"async={slots}",) for a in ("--slots", value)]
        slot_args += [*args, *shlex.split(os.environ.get("BENCH_RUNWORKER_ARGS", ""))]
        env = self.environment(url, env)
        self.logs = [tempfile.TemporaryFile() for _ in range(processes)]
        self.procs = [
            subprocess.Popen(
                # tools.bench.worker is manage.py runworker, importing runqueue from
                # BENCH_RUNQUEUE_SRC when that is set.
                [sys.executable, "-m", "tools.bench.worker", *slot_args]
                + ["--worker-id", f"bench-{label}-{i}"],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
            for i, log in enumerate(self.logs)
        ]

    @staticmethod
    def environment(url: str, env: dict[str, str] | None = None) -> dict[str, str]:
        """A bench runworker's (or ``tools.bench.manage``'s) environment for ``url``."""
        return (
            dict(os.environ)
            | {
                "DATABASE_URL": url,
                "RUNQUEUE_LOG_LEVEL": "WARNING",
                "RUNQUEUE_HANDLER_MODULES": "tools.bench.handlers",
            }
            | (env or {})
        )

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"runworker exited with {proc.returncode}: {tail}")

    def pids(self) -> list[int]:
        """The runworker processes and their descendants (``--processes``:
        a supervisor's workers), read afresh."""
        found, level = [], [p.pid for p in self.procs]
        while level:
            found += level
            level = [child for pid in level for child in _children(pid)]
        return found

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                total += measure.process_cpu_seconds(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # exited meanwhile
        return total

    def pause(self, stats: measure.Stats | None = None) -> None:
        """SIGSTOP every process and wait until all their threads are stopped.
        With ``stats``, never leave one frozen inside a transaction or a
        statement (the server would end it after the pool's
        idle_in_transaction_session_timeout): resume and try again."""
        for _ in range(100):
            pids = self.pids()
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            _wait_threads(pids, stopped=True)
            if stats is None or not stats.busy():
                return
            self.resume()
            time.sleep(0.02)
        raise RuntimeError("could not pause the runworker processes outside a transaction")

    def resume(self) -> None:
        pids = self.pids()
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        _wait_threads(pids, stopped=False)

    def stop(self) -> None:
        """SIGTERM and wait (resumed first if paused, a moment before the
        signal); kill what has not exited after 20 s."""
        alive = [p for p in self.procs if p.poll() is None]
        paused = [pid for pid in self.pids() if any(s in "Tt" for s in _thread_states(pid))]
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        if paused:
            _wait_threads(paused, stopped=False)
            time.sleep(0.2)
        for proc in alive:
            proc.send_signal(signal.SIGTERM)
        for proc in alive:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


def _children(pid: int) -> list[int]:
    """A process's children (/proc/<pid>/task/<tid>/children)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    out += [int(child) for child in f.read().split()]
            except FileNotFoundError:
                continue
    except FileNotFoundError:
        pass
    return out


def _wait_threads(pids: list[int], *, stopped: bool) -> None:
    """Until every thread of the processes is stopped (T) or none is."""
    end = time.monotonic() + 10
    while True:
        states = [s for pid in pids for s in _thread_states(pid)]
        if all((s in "Tt") == stopped for s in states):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"runworker threads still {'running' if stopped else 'stopped'}")
        time.sleep(0.001)


def _thread_states(pid: int) -> list[str]:
    states = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that just ended
    except FileNotFoundError:
        pass  # the process has exited
    return states


class Deployment:
    """How a shape's workers reach the server, when not straight through the
    database's URL (``tools.bench.pooler``: through a PgBouncer, or with prepared
    statements off)."""

    def env(self, url: str) -> dict[str, str]:
        """The workers' environment for the shape's database ``url``."""
        return {}

    def release(self, shape: Shape) -> None:
        """After the workers have exited: end what still holds a backend of
        the database (a pooler's server connections), so the count can end."""

    def sampler(self, shape: Shape) -> Callable[[], Any] | None:
        """Something to run beside the drain (e.g. counting server connections)."""
        return None


class Shape:
    """One drain's runworker processes, in a database of their own."""

    def __init__(
        self,
        name: str,
        url: str,
        processes: int,
        slots: int,
        deploy: Deployment | None = None,
        supervised: int = 1,
    ) -> None:
        """``supervised``: each runworker spreads its slots over this many
        worker processes of its own (``--processes``)."""
        self.name, self.url, self.processes, self.slots = name, url, processes, slots
        self.supervised = supervised
        self.deploy = deploy
        self.window = measure.CommitWindow(url)
        env = deploy.env(url) if deploy is not None else None
        args = (f"--processes={supervised}",) if supervised > 1 else ()
        self.workers = Workers(url, processes, slots, label=name, env=env, args=args)
        self.idle: dict[str, float] = {}

    def wait_registered(self, timeout: float) -> None:
        """Until every process has its worker row (the probe's backend is gone
        before any count starts)."""
        probe = measure.Probe(self.url)
        try:
            end = time.monotonic() + timeout
            query = "SELECT count(*) FROM runqueue_worker WHERE stopped_at IS NULL"
            while probe.value(query) < self.processes * self.supervised:
                self.workers.check_alive()
                if time.monotonic() > end:
                    raise RuntimeError(f"{self.name}: runworker processes did not start")
                time.sleep(0.05)
        finally:
            probe.close()
        self.window.stats.wait_gone({probe.pid})


class Drains:
    """The headline drains, staged: enter to start and pause every shape's
    workers, take other figures, then :meth:`run`."""

    def __init__(
        self,
        base_url: str,
        shapes: dict[str, tuple[int, ...]],
        settle: float = SETTLE_SECONDS,
        deployments: Mapping[str, Deployment] | None = None,
    ) -> None:
        self.base_url = base_url
        self.spec = shapes
        self.deployments = dict(deployments or {})
        self.settle = settle
        self.shapes: list[Shape] = []
        self.stack = ExitStack()
        self.settled_at = 0.0
        self._idle: list[tuple[int, float]] = []

    def __enter__(self) -> Drains:
        from django.db import connections

        rq_db.reset()
        connections.close_all()  # a template database must have no connections
        base = measure.CommitWindow(self.base_url)
        try:
            connect_commits = base.calibrate()
        finally:
            base.close()
        try:
            for name, (processes, slots, *supervised) in self.spec.items():
                url = self.stack.enter_context(
                    common.scratch_database(f"rq_{name}", template=self.base_url)
                )
                shape = Shape(name, url, processes, slots, self.deployments.get(name), *supervised)
                self.stack.callback(shape.window.close)
                self.stack.callback(shape.workers.stop)
                shape.window.connect_commits = connect_commits
                self.shapes.append(shape)
            for shape in self.shapes:
                shape.wait_registered(timeout=120)
            self._idle = [(s.window.stats.commits(), s.workers.cpu_seconds()) for s in self.shapes]
            time.sleep(IDLE_SECONDS)
            for shape in self.shapes:
                shape.workers.pause(shape.window.stats)
            self.settled_at = time.monotonic() + self.settle
        except BaseException:
            self.stack.close()
            raise
        return self

    def _idle_figures(self) -> None:
        """Commits and CPU of the running idle moment (commits read once all
        are reported, so about: the start-up's last ones are in it)."""
        for shape, (commits, cpu) in zip(self.shapes, self._idle, strict=True):
            shape.idle = {
                "seconds": IDLE_SECONDS,
                "commits_per_s": round((shape.window.stats.commits() - commits) / IDLE_SECONDS),
                "cpu_percent": round((shape.workers.cpu_seconds() - cpu) * 100 / IDLE_SECONDS, 1),
                # From exec to the worker row written (Django set up, handlers
                # imported, slots started): a process's start-up.
                "startup_cpu_s": round(cpu / shape.processes, 3),
            }

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def run(self, n: int, log) -> dict[str, dict[str, Any]]:
        time.sleep(max(0.0, self.settled_at - time.monotonic()))
        self._idle_figures()
        out = {}
        for shape in self.shapes:
            log(f"runqueue: drain, {shape.processes} runworker x async={shape.slots}")
            out[shape.name] = _drain(shape, n)
        return out


def _drain(shape: Shape, n: int) -> dict[str, Any]:
    """N no-op runs bulk-loaded (one transaction, ANALYZEd) into the shape's
    idle workers; runs/s, commits per run and worker CPU per run."""
    window, workers = shape.window, shape.workers
    window.start()
    cpu_before = workers.cpu_seconds()
    probe = window.probe()
    sampler = shape.deploy.sampler(shape) if shape.deploy is not None else None
    with probe.transaction() as conn:
        conn.execute(*rq_db.load(n))
        conn.execute("ANALYZE runqueue_run")
        conn.execute(rq_db.WAKE)
    # The load's WAL is not the drain's (the peers load before their window):
    # count from here, the workers still paused (their wake-up waits for them).
    window.wal_start()
    workers.resume()
    complete = _wait_done(probe, workers, timeout=max(120, n / 20))
    cpu = workers.cpu_seconds() - cpu_before
    beside = sampler() if sampler is not None else None
    stopping = time.monotonic()
    workers.stop()
    if shape.deploy is not None:
        shape.deploy.release(shape)
    commits = window.stop()
    shutdown = time.monotonic() - stopping
    with psycopg.connect(shape.url) as conn:
        runs, seconds = conn.execute(rq_db.WINDOW).fetchone()
    return (
        measure.figures(
            runs,
            float(seconds),
            commits=commits,
            cpu_seconds=cpu,
            cpu_source=CPU_SOURCE,
            complete=complete,
            wal_bytes=window.wal_bytes,
            server_cpu_seconds=window.server_cpu_seconds,
        )
        | {
            "processes": shape.processes,
            "slots_per_process": shape.slots,
            "idle_before_load": shape.idle,
            "shutdown_seconds": round(shutdown, 2),
        }
        | ({"beside": beside} if beside is not None else {})
    )


def _wait_done(probe: measure.Probe, workers: Workers, timeout: float) -> bool:
    """Poll (each poll a counted commit) until every run has finished."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if probe.value(DONE):
            return True
        workers.check_alive()
        time.sleep(0.01)
    return False
