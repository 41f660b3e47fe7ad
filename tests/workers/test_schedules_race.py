"""Each tick fires once however many workers race for it: threads and
processes on real connections, a process killed mid-tick, and real
runworker processes whose sweepers tick the schedules."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from runqueue import schedules
from runqueue.db import db_now
from runqueue.models import Run, RunStatus, Schedule, ScheduleTick
from tests.database.schedules.test_schedules import HOUR, T0, make, ticks_fired
from tests.helpers import Worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[2]


class Ticker:
    """``python -m tests.workers.schedule_ticker`` against the test database."""

    def __init__(self, now: dt.datetime, log: Path, *args: str) -> None:
        db = connection.settings_dict
        database = {k: db[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT")}
        env = dict(os.environ) | {
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "RUNQUEUE_TEST_DATABASE": json.dumps(database),
            "PYTHONUNBUFFERED": "1",
        }
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workers.schedule_ticker", now.isoformat(), *args],
            cwd=REPO,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def says(self, text: str) -> bool:
        return text in self.output()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._out.close()


@pytest.fixture
def ticker(tmp_path) -> Iterator:
    started: list[Ticker] = []

    def start(now: dt.datetime, *args: str) -> Ticker:
        t = Ticker(now, tmp_path / f"ticker-{len(started)}.log", *args)
        started.append(t)
        return t

    yield start
    for t in started:
        t.stop()


def test_racing_threads_fire_each_tick_once() -> None:
    """Eight threads tick at the same instant: five missed hours, five runs."""
    schedule = make(catch_up="all")
    barrier = threading.Barrier(8)

    def race() -> int:
        barrier.wait()
        return len(schedules.tick(now=T0 + 5 * HOUR))

    workers = [Worker(race, name=f"t{i}") for i in range(8)]
    for w in workers:
        w.start()
    assert sum(w.outcome() for w in workers) == 5
    assert Run.objects.count() == 5 and len(ticks_fired(schedule)) == 5


def test_racing_processes_fire_each_tick_once(ticker, tmp_path) -> None:
    """Three processes, released together, each ticking the same clock."""
    schedule = make(catch_up="all")
    go = tmp_path / "go"
    procs = [ticker(T0 + 3 * HOUR, "--go", str(go)) for _ in range(3)]
    wait_until(lambda: all(p.says("READY") for p in procs), what="tickers ready")
    go.touch()
    for p in procs:
        assert p.proc.wait(60) == 0, p.output()
    fired = [int(p.output().split("FIRED ")[1].split()[0]) for p in procs]
    assert sum(fired) == 3, [p.output() for p in procs]
    assert Run.objects.count() == 3 and len(ticks_fired(schedule)) == 3


def test_a_process_killed_mid_tick_leaves_the_tick_to_the_next_one(ticker) -> None:
    """A holds the tick (run written, not committed) and is SIGKILLed; B,
    racing it all along, fires the same tick once A's transaction is gone."""
    schedule = make()
    now = T0 + HOUR
    a = ticker(now, "--hold")
    wait_until(lambda: a.says("HELD 1"), what="A inside the tick")
    # While A holds the schedule's row, another worker steps over it.
    assert schedules.tick(now=now) == []
    stop = threading.Event()

    def keep_ticking() -> int:
        fired = 0
        while not stop.is_set() and not fired:
            fired += len(schedules.tick(now=now))
        return fired

    b = Worker(keep_ticking, name="B")
    b.start()
    a.proc.send_signal(signal.SIGKILL)
    assert a.proc.wait(30) == -signal.SIGKILL
    wait_until(lambda: b.result is not None or not b.is_alive(), what="B fired")
    stop.set()
    assert b.outcome() == 1
    run = Run.objects.get()
    assert ticks_fired(schedule) == [dt.datetime(2026, 5, 4, 13, tzinfo=dt.UTC)]
    assert ScheduleTick.objects.get().run_id == run.id
    # And nothing more once everyone is done.
    assert schedules.tick(now=now) == []


@pytest.mark.slow
def test_three_runworkers_one_killed_fire_each_missed_tick_once(start_worker) -> None:
    """Real workers on the real clock: a schedule four hours behind (catch-up
    all) is found by every worker's sweeper; one worker is SIGKILLed on the
    way. Four ticks, four runs."""
    now = db_now()
    schedule = make("behind", "0 * * * *", at=now - 4 * HOUR, catch_up="all", kind="test.record")
    Schedule.objects.filter(pk=schedule.pk).update(paused_at=now)  # held until all are up
    fast = ["--sweep-seconds", "0.2", "--poll-seconds", "0.2", "--slots", "maintenance=1"]
    fast += ["--lease-seconds", "2", "--heartbeat-seconds", "0.5"]
    workers = [start_worker(*fast, "--worker-id", f"w{i}") for i in range(3)]
    wait_until(
        lambda: all("started" in w.output() for w in workers), timeout=60, what="workers up"
    )
    Schedule.objects.filter(pk=schedule.pk).update(paused_at=None)
    workers[0].send(signal.SIGKILL)
    wait_until(
        lambda: (
            Run.objects.filter(principal="schedule:behind", status=RunStatus.SUCCEEDED).count()
            >= 4
        ),
        timeout=60,
        what="the four runs done",
    )
    assert len(ticks_fired(schedule)) == 4
    assert Run.objects.filter(principal="schedule:behind").count() == 4
    assert "Schedule behind fired tick" in "".join(w.output() for w in workers)
