"""runqueue through PgBouncer against direct, in the same minutes (issue 20).

The drain: ``PROCESSES`` runworker processes of ``SLOTS`` async slots (32
slots) drain N no-op runs, as ``rq_drain`` does (idle, paused and settled
first, so commits per run are exact), in three deployments:

- ``direct``: straight to the server, runqueue's defaults (the hot
  statements prepared);
- ``direct_unprepared``: the same with ``PREPARED_STATEMENTS = False``;
- ``pooled``: every statement but LISTEN through a PgBouncer in transaction
  mode with ``default_pool_size = POOL_SIZE`` (8 server connections for 32
  slots), LISTEN straight to the server, as docs/operations.md's deployment section
  says (``POOLER = "transaction"``, so nothing prepared: PgBouncer 1.18).

Each round drains every deployment once, the second round in the reverse
order (ABC CBA), so a machine that drifts hits them alike. Beside each drain
a sampler counts the database's backends (the pooled drain: the server
connections the pool opened, LISTEN's apart).

The pickup: one idle runworker (``interactive=2,async=2``) direct and one
pooled, one interactive run at a time into each in turn, ms from the
INSERT + NOTIFY's commit to the handler's start (the ``bench.stamp`` handler
writes CLOCK_MONOTONIC into a FIFO the bench reads).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tools.bench import common, handlers, measure, rq_db, rq_drain
from tools.topology import pgbouncer

PROCESSES, SLOTS, POOL_SIZE = 4, 8, 8
#: The drain through the pooler within 10 % of direct (issue 20, item 6).
TARGET_RATIO = 0.90
#: The LISTEN connections' application_name, to tell them from pooled ones.
LISTEN_APP = "bench-listen"
VARIANTS = ("direct", "pooled", "direct_unprepared")
PICKUP_SPEC = ("interactive=2", "async=2")
#: Backends of a database, those not LISTENing, and their pids (read from the server's database).
BACKENDS = (
    "SELECT count(*), count(*) FILTER (WHERE application_name <> %s), array_agg(pid)"
    " FROM pg_stat_activity WHERE datname = %s AND NOT pid = ANY(%s)"
)


def _dbname(url: str) -> str:
    return conninfo_to_dict(url)["dbname"]


class Sampler:
    """Counts a database's backends every 10 ms while a drain runs (from
    the server's own database, so the count adds no commit to it)."""

    def __init__(self, shape: rq_drain.Shape) -> None:
        self.shape = shape
        self.stop_event = threading.Event()
        self.most = self.most_not_listening = 0
        self.pids: set[int] = set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        dbname = _dbname(self.shape.url)
        with psycopg.connect(common.SERVER_URL, autocommit=True) as conn:
            while not self.stop_event.wait(0.01):
                own = [p.pid for p in self.shape.window.probes]
                total, pooled, pids = conn.execute(BACKENDS, [LISTEN_APP, dbname, own]).fetchone()
                self.most = max(self.most, total)
                self.most_not_listening = max(self.most_not_listening, pooled)
                self.pids.update(pids or [])

    def __call__(self) -> dict[str, int]:
        self.stop_event.set()
        self.thread.join(10)
        return {
            "backends_max": self.most,
            "backends_not_listen_max": self.most_not_listening,
            "backends_seen": len(self.pids),
        }


class Direct(rq_drain.Deployment):
    """Straight to the server; ``prepared`` False turns the hot statements'
    server-side prepares off."""

    def __init__(self, prepared: bool = True) -> None:
        self.prepared = prepared

    def env(self, url: str) -> dict[str, str]:
        if self.prepared:
            return {}
        return {"RUNQUEUE_SETTINGS": json.dumps({"PREPARED_STATEMENTS": False})}

    def sampler(self, shape: rq_drain.Shape) -> Sampler:
        return Sampler(shape)


class Pooled(rq_drain.Deployment):
    """Through ``bouncer`` in transaction mode, LISTEN straight to the server."""

    def __init__(self, bouncer: pgbouncer.Bouncer) -> None:
        self.bouncer = bouncer

    def url(self, url: str) -> str:
        return f"postgresql://postgres@{self.bouncer.host}:{self.bouncer.port}/{_dbname(url)}"

    def env(self, url: str) -> dict[str, str]:
        join = "&" if "?" in url else "?"
        return {
            "DATABASE_URL": self.url(url),
            "LISTEN_DATABASE_URL": f"{url}{join}application_name={LISTEN_APP}",
            "RUNQUEUE_POOLER": "transaction",
        }

    def release(self, shape: rq_drain.Shape) -> None:
        """The workers have exited; PgBouncer keeps its idle server
        connections open: end them (an ended backend reports its commits)."""
        own = [p.pid for p in shape.window.probes]
        shape.window.stats.conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND NOT pid = ANY(%s)",
            [_dbname(shape.url), own],
        )

    def sampler(self, shape: rq_drain.Shape) -> Sampler:
        return Sampler(shape)


def _server() -> dict[str, object]:
    """The bench server as Django DATABASES keys, for PgBouncer's ``[databases]``."""
    info = conninfo_to_dict(common.SERVER_URL)
    return {
        "HOST": info.get("host") or "127.0.0.1",
        "PORT": info.get("port") or 5432,
        "USER": info.get("user") or "postgres",
        "NAME": info.get("dbname") or "postgres",
    }


def run(
    profile: common.Profile, base_url: str, log, settle: float = rq_drain.SETTLE_SECONDS
) -> dict[str, Any]:
    """The drains (``profile.pooler_rounds`` rounds) and the pickup. ``settle``
    below ``rq_drain.SETTLE_SECONDS`` makes the commit counts inexact (a test's
    shortcut)."""
    from django.db import connections

    out: dict[str, Any] = {
        "processes": PROCESSES,
        "slots_per_process": SLOTS,
        "pool_size": POOL_SIZE,
        "runs_per_drain": profile.drain_runs,
        "rounds": [],
    }
    with pgbouncer.start(_server(), "transaction", pool_size=POOL_SIZE) as bouncer:
        out["pgbouncer"] = _version()
        deploy = {
            "direct": Direct(),
            "pooled": Pooled(bouncer),
            "direct_unprepared": Direct(prepared=False),
        }
        for number in range(profile.pooler_rounds):
            order = VARIANTS if number % 2 == 0 else VARIANTS[::-1]
            names = {f"pool_{v}_r{number + 1}": v for v in order}
            log(f"runqueue: through PgBouncer, round {number + 1}: {', '.join(order)}")
            connections.close_all()
            with rq_drain.Drains(
                base_url,
                dict.fromkeys(names, (PROCESSES, SLOTS)),
                settle=settle,
                deployments={name: deploy[v] for name, v in names.items()},
            ) as drains:
                if number == 0:
                    log("runqueue: pickup direct and through PgBouncer (while the drains settle)")
                    out["pickup"] = pickup(base_url, deploy["pooled"], profile.latency_samples)
                drained = drains.run(profile.drain_runs, log)
            out["rounds"].append({names[name]: figures for name, figures in drained.items()})
    out |= summary(out["rounds"])
    return out


def _version() -> str:
    program = pgbouncer.binary()
    if program is None:
        return "?"
    import subprocess

    done = subprocess.run([program, "--version"], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).splitlines()[0] if (done.stdout or done.stderr) else "?"


def summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each deployment over every round (runs over seconds, commits and CPU
    per run over all runs), and pooled against direct."""
    total: dict[str, Any] = {}
    for variant in VARIANTS:
        drains = [r[variant] for r in rounds if variant in r]
        if not drains:
            continue
        runs = sum(d["runs"] for d in drains)
        seconds = sum(d["seconds"] for d in drains)
        commits = sum(d.get("commits", 0) for d in drains)
        cpu = sum((d.get("cpu_us_per_run") or 0) * d["runs"] for d in drains)
        beside = [d.get("beside", {}) for d in drains]
        total[variant] = {
            "runs": runs,
            "runs_per_s": measure.rate(runs, seconds),
            "commits_per_run": round(commits / runs, 3) if runs else None,
            "cpu_us_per_run": round(cpu / runs, 1) if runs else None,
            "complete": all(not d.get("incomplete") for d in drains),
            "backends_max": max((b.get("backends_max", 0) for b in beside), default=0),
            "backends_not_listen_max": max(
                (b.get("backends_not_listen_max", 0) for b in beside), default=0
            ),
        }
    out: dict[str, Any] = {"total": total}
    direct, pooled = total.get("direct"), total.get("pooled")
    if direct and pooled and direct["runs_per_s"]:
        ratio = round(pooled["runs_per_s"] / direct["runs_per_s"], 3)
        out["pooled_to_direct"] = ratio
        out["per_round"] = [
            round(r["pooled"]["runs_per_s"] / r["direct"]["runs_per_s"], 3)
            for r in rounds
            if r.get("direct", {}).get("runs_per_s") and "pooled" in r
        ]
        out["target_met"] = bool(
            ratio >= TARGET_RATIO
            and pooled["complete"]
            and pooled["backends_not_listen_max"] <= POOL_SIZE
        )
    unprepared = total.get("direct_unprepared")
    if direct and unprepared and direct["runs_per_s"]:
        out["unprepared_to_prepared"] = round(unprepared["runs_per_s"] / direct["runs_per_s"], 3)
    return out


class Stamps:
    """The FIFO the ``bench.stamp`` handlers write to, and the wait for one."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rq-bench-stamps-"))
        self.folder.chmod(0o755)
        self.path = self.folder / "stamps"
        os.mkfifo(self.path, 0o666)
        self.reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        # Held open so the reader never sees end-of-file between handlers.
        self.keep = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        self.buffer = b""
        self.seen: dict[int, float] = {}

    def wait(self, seq: int, timeout: float = 10) -> float:
        deadline = time.monotonic() + timeout
        while seq not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"pickup run {seq} did not start within {timeout} s")
            ready, _, _ = select.select([self.reader], [], [], left)
            if ready:
                self.buffer += os.read(self.reader, 65536)
                *lines, self.buffer = self.buffer.split(b"\n")
                for line in lines:
                    got, at = line.split()
                    self.seen[int(got)] = float(at)
        return self.seen.pop(seq)

    def close(self) -> None:
        os.close(self.reader)
        os.close(self.keep)
        shutil.rmtree(self.folder, ignore_errors=True)


def pickup(base_url: str, pooled: Pooled, samples: int) -> dict[str, Any]:
    """Idle interactive pickup, direct and pooled in turn, one run at a time."""
    from django.db import connections

    connections.close_all()  # the template database must have no connections
    latencies: dict[str, list[float]] = {"direct": [], "pooled": []}
    with ExitStack() as stack:
        stamps = Stamps()
        stack.callback(stamps.close)
        targets: dict[str, psycopg.Connection] = {}
        for label in latencies:
            url = stack.enter_context(
                common.scratch_database(f"pickup_{label}", template=base_url)
            )
            env = {handlers.STAMP_FIFO_ENV: str(stamps.path)}
            if label == "pooled":
                env |= pooled.env(url)
            workers = rq_drain.Workers(url, 1, 4, f"pickup-{label}", env=env, spec=PICKUP_SPEC)
            stack.callback(workers.stop)
            targets[label] = stack.enter_context(psycopg.connect(url, autocommit=True))
            _wait_registered(targets[label], workers)
        seq = 0
        for i in range(samples + 5):  # the first 5 of each warm up
            order = list(targets) if i % 2 == 0 else list(targets)[::-1]
            for label in order:
                common.idle_gap()
                seq += 1
                with targets[label].transaction():
                    targets[label].execute(
                        *rq_db.load(
                            1, kind="bench.stamp", priority=0, payload=json.dumps({"seq": seq})
                        )
                    )
                    targets[label].execute(rq_db.WAKE)
                committed = time.clock_gettime(time.CLOCK_MONOTONIC)
                started = stamps.wait(seq)
                if i >= 5:
                    latencies[label].append((started - committed) * 1000)
    return {label: common.percentiles(ms) for label, ms in latencies.items()}


def _wait_registered(conn: psycopg.Connection, workers: rq_drain.Workers) -> None:
    deadline = time.monotonic() + 120
    while not conn.execute(
        "SELECT count(*) FROM runqueue_worker WHERE stopped_at IS NULL"
    ).fetchone()[0]:
        workers.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError("the pickup's runworker did not start")
        time.sleep(0.05)
