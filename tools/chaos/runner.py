"""The chaos run: submit, supervise workers, inject faults, drain, verify."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import DatabaseError, connection

import runqueue
from runqueue import leases, testing
from runqueue.conf import ON_BUSY
from runqueue.history import partitions
from runqueue.models import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    Budget,
    ConcurrencyLimit,
    EventLog,
    PriorityClass,
    Run,
)
from tools.chaos.handlers import (
    FAIL_ONCE,
    KIND,
    KIND_ASYNC,
    KIND_FANOUT,
    KIND_GATHER,
    KIND_SIGNAL,
    KIND_TREE,
    SIGNAL,
)
from tools.chaos.verify import (
    figures,
    run_tree_figures,
    session_figures,
    subagent_figures,
    tree_ids,
)

logger = logging.getLogger("chaos")
PROJECT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class Profile:
    runs: int
    workers: int
    chaos_seconds: float
    drain_seconds: float
    lease_seconds: float = 2.0
    fault_every: tuple[float, float] = (1.0, 3.0)
    #: Every so many runs a fan-out of this many children, a run waiting
    #: for a signal, a tree (3 levels) the soak cancels while it runs.
    fanout_every: int = 10
    fanout_children: int = 4
    signal_every: int = 10
    tree_every: int = 30
    #: Every so many runs an async parent of gathered spawns and tool calls,
    #: every other one dead-lettered once for the soak to requeue.
    gather_every: int = 10
    #: Every so many turns a double text: a second message to the turn's
    #: session while it is busy, with an on_busy policy drawn from all five
    #: (a third of them with a short start_within, so some expire in line
    #: or unclaimed), docs/decisions/sessions.md "Busy sessions: on_busy".
    double_text_every: int = 3
    #: Failovers in the chaos window (in place of the database restart):
    #: the primary of a cluster pair crashed, its synchronous standby
    #: promoted, a new standby made (``runqueue_chaos --profile failover``).
    failovers: int = 0


#: Some chaos runs share a capped concurrency key (every fifth run, two
#: keys): the soak counts claims that took a key past its cap from the event
#: log (``cap_violations``, must be 0).
CAPPED_KEYS = ("chaos-capped-a", "chaos-capped-b")
CAPS = {
    ("chaos-capped-a", PriorityClass.INTERACTIVE): 1,
    ("chaos-capped-a", PriorityClass.ASYNC): 1,
    ("chaos-capped-b", PriorityClass.INTERACTIVE): 2,
    ("chaos-capped-b", PriorityClass.ASYNC): 2,
    ("chaos-capped-b", PriorityClass.MAINTENANCE): 1,
}


#: Every third chaos turn declares a model call on one budget of short
#: windows (so a run crosses many): its handler settles each reservation to a
#: random use at most what it reserved, and the event log is replayed for
#: windows past the budget (``budget_overruns``, must be 0).
BUDGET_KEY = "chaos:model"
BUDGET = {"tokens": 4000, "requests": 12, "per_seconds": 2}


def capped_key(i: int) -> str | None:
    """The concurrency key of the i-th chaos run (None: its tenant's)."""
    return CAPPED_KEYS[(i // 5) % 2] if i % 5 == 0 else None


PROFILES = {
    "short": Profile(runs=150, workers=3, chaos_seconds=45, drain_seconds=90),
    "failover": Profile(runs=150, workers=3, chaos_seconds=45, drain_seconds=90, failovers=3),
    "long": Profile(
        runs=4000,
        workers=4,
        chaos_seconds=1800,
        drain_seconds=600,
        fanout_every=100,
        fanout_children=1000,
        signal_every=4,
        tree_every=100,
    ),
}


def retrying[T](fn: Callable[[], T], what: str, deadline: float = 120) -> T:
    """The controller's own queries survive the database restart or the
    failover it causes (a multi-host URL reconnects to the new primary)."""
    end = time.monotonic() + deadline
    while True:
        try:
            return fn()
        except DatabaseError as exc:
            if time.monotonic() > end:
                raise
            logger.info("%s: database unavailable (%s); retrying", what, exc.__class__.__name__)
            connection.close()
            time.sleep(0.5)


#: Each chaos worker's slots (runworker --slots).
WORKER_SLOTS = ("interactive=2", "async=2", "maintenance=1", "interactive,async=4:loop")


def slots_per_worker() -> int:
    """How many runs one chaos worker runs at once."""
    from runqueue.worker.spec import SlotSpec

    return sum(SlotSpec.parse(text).count for text in WORKER_SLOTS)


def database_url(db: dict[str, Any], name: str) -> str:
    """A DATABASE_URL (config/settings.py) for database ``name`` on the
    server of ``db`` (Django DATABASES keys); a socket folder goes in the
    query, where django-environ reads it."""
    user, password = quote(str(db["USER"] or "postgres")), quote(str(db["PASSWORD"] or ""))
    host, port = str(db["HOST"] or "127.0.0.1"), db["PORT"] or 5432
    if host.startswith("/"):
        return f"postgres://{user}:{password}@:{port}/{quote(name)}?host={quote(host)}"
    return f"postgres://{user}:{password}@{host}:{port}/{quote(name)}"


@dataclass(frozen=True)
class Pooled:
    """The workers' way to the database through a transaction pooler: their
    default database is ``url`` (the pooler), LISTEN goes to ``listen_url``
    (the server); the controller stays on the server."""

    url: str
    listen_url: str
    pool_size: int


@dataclass
class WorkerSlot:
    """One supervised worker: restarted whenever its process ends."""

    index: int
    generation: int = 0
    proc: subprocess.Popen | None = None
    frozen: bool = False
    #: The soak killed or SIGTERMed this generation: its exit was asked for.
    ended_by_the_soak: bool = False

    @property
    def worker_id(self) -> str:
        return f"chaos-w{self.index}-g{self.generation}"


@dataclass
class Counts:
    kills: int = 0
    freezes: int = 0
    terms: int = 0
    backend_terminations: int = 0
    db_restarts: int = 0
    failovers: int = 0
    #: The new primary's now() at each promotion.
    promotions: list[dt.datetime] = field(default_factory=list)
    worker_restarts: int = 0
    #: Workers that ended although the soak did not kill or SIGTERM them.
    unasked_exits: list[str] = field(default_factory=list)
    inputs_delivered: int = 0
    cancels: int = 0
    operator_requeues: int = 0
    retention_passes: int = 0
    kill_to_reclaim_seconds: list[float] = field(default_factory=list)
    #: Double texts by what their submit did (enqueued, merged, ...,
    #: session_busy for reject, session_queue_full).
    double_texts: dict[str, int] = field(default_factory=dict)
    #: Sessions seen with two active runs at once, sampled every round of
    #: the chaos window and the drain (must be 0).
    double_actives_seen: int = 0


class ChaosRun:
    def __init__(
        self,
        profile: Profile,
        *,
        database: str,
        restart_db: Callable[[], None] | None,
        seed: int,
        log_dir: Path,
        failover: Callable[[], dt.datetime] | None = None,
        worker_env: dict[str, str] | None = None,
        pooled: Pooled | None = None,
    ) -> None:
        """``failover`` (the failover profile): crash the primary, promote
        the standby, make a new synchronous standby; the promotion instant
        on the new primary's clock. ``worker_env``: what workers need
        beyond the database name (the pair's multi-host DATABASE_URL)."""
        self.profile = profile
        self.pooled = pooled
        self.database = database
        self.restart_db = restart_db
        self.failover = failover
        self.worker_env = worker_env or {}
        self.rng = random.Random(seed)  # noqa: S311 - fault schedule, not security
        self.log_dir = log_dir
        self.slots = [WorkerSlot(i) for i in range(profile.workers)]
        self.counts = Counts()
        self.submitted: set[Any] = set()
        self.kills: list[tuple[dt.datetime, list[Any]]] = []
        #: Signal runs -> the data sent them; trees cancelled -> (root, its
        #: runs when the cancel returned, how many of them were not terminal).
        self.signal_runs: set[Any] = set()
        #: Submitted runs a retention pass dropped (finished, their tree too).
        self.dropped: set[Any] = set()
        self.signals_sent: dict[Any, Any] = {}
        #: Turns submitted so far (double texts are submitted beside them).
        self.turns = 0
        self.trees: list[Any] = []
        self.tree_cancels: list[tuple[Any, set[Any], int]] = []
        self._lock = threading.Lock()

    # --- workers -----------------------------------------------------------------

    def _start(self, slot: WorkerSlot) -> None:
        p = self.profile
        env = dict(os.environ)
        env |= {
            "RUNQUEUE_DATABASE_NAME": self.database,
            "RUNQUEUE_SETTINGS": json.dumps(
                {"BACKOFF_BASE_SECONDS": 0.2, "BACKOFF_MAX_SECONDS": 2}
            ),
            "RUNQUEUE_LOG_LEVEL": "WARNING",
            "RUNQUEUE_CHAOS": "1",
        }
        env |= self.worker_env
        if self.pooled is not None:
            env |= {
                "DATABASE_URL": self.pooled.url,
                "LISTEN_DATABASE_URL": self.pooled.listen_url,
                "RUNQUEUE_POOLER": "transaction",
            }
        slot.generation += 1
        slot.ended_by_the_soak = False
        log = (self.log_dir / f"{slot.worker_id}.log").open("wb")
        slot.proc = subprocess.Popen(  # noqa: S603 - our own manage.py
            [
                sys.executable,
                "manage.py",
                "runworker",
                *(arg for text in WORKER_SLOTS for arg in ("--slots", text)),
                "--lease-seconds",
                str(p.lease_seconds),
                "--heartbeat-seconds",
                str(p.lease_seconds / 4),
                "--sweep-seconds",
                str(p.lease_seconds / 4),
                "--poll-seconds",
                "1",
                "--grace-seconds",
                "2",
                "--worker-id",
                slot.worker_id,
            ],
            cwd=PROJECT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()

    def supervise(self) -> None:
        """Restart workers that ended, as a process supervisor would."""
        for slot in self.slots:
            if slot.proc is None or (slot.proc.poll() is not None and not slot.frozen):
                if slot.proc is not None:
                    self.counts.worker_restarts += 1
                    if not slot.ended_by_the_soak:
                        self.counts.unasked_exits.append(slot.worker_id)
                self._start(slot)

    def stop_workers(self) -> None:
        for slot in self.slots:
            if slot.proc and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGCONT)
                slot.proc.send_signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.proc:
                try:
                    slot.proc.wait(30)
                except subprocess.TimeoutExpired:
                    slot.proc.kill()
                    slot.proc.wait()

    # --- faults --------------------------------------------------------------------

    def _live(self) -> list[WorkerSlot]:
        return [s for s in self.slots if s.proc and s.proc.poll() is None and not s.frozen]

    def kill(self) -> None:
        slot = self.rng.choice(self._live())

        def held() -> tuple[dt.datetime, list[Any]]:
            with connection.cursor() as cursor:
                cursor.execute("SELECT now()")
                now = cursor.fetchone()[0]
            ids = list(
                Run.objects.filter(
                    status="running", lease_owner__startswith=slot.worker_id + "/"
                ).values_list("id", flat=True)
            )
            return now, ids

        at, ids = retrying(held, "kill")
        slot.ended_by_the_soak = True
        slot.proc.send_signal(signal.SIGKILL)
        slot.proc.wait()
        self.kills.append((at, ids))
        self.counts.kills += 1

    def freeze(self) -> None:
        slot = self.rng.choice(self._live())
        slot.frozen = True
        slot.proc.send_signal(signal.SIGSTOP)
        self.counts.freezes += 1

        def thaw() -> None:
            slot.proc.send_signal(signal.SIGCONT)
            slot.frozen = False

        threading.Timer(self.profile.lease_seconds * 3, thaw).start()

    def term(self) -> None:
        slot = self.rng.choice(self._live())
        slot.ended_by_the_soak = True
        slot.proc.send_signal(signal.SIGTERM)
        self.counts.terms += 1

    def cancel(self) -> None:
        """A user presses stop on a few running turns (sync and async)."""

        def go() -> int:
            running = list(
                Run.objects.filter(id__in=self.submitted, status="running").values_list(
                    "id", flat=True
                )[:50]
            )
            done = 0
            for run_id in self.rng.sample(running, min(3, len(running))):
                try:
                    runqueue.cancel(run_id, reason="chaos", actor="chaos")
                    done += 1
                except runqueue.InvalidTransition:
                    pass  # it ended meanwhile
            return done

        self.counts.cancels += retrying(go, "cancel")

    def cancel_tree(self) -> None:
        """Cancel a tree of runs while its workers run it; note what it held."""

        def go() -> None:
            live = list(
                Run.objects.filter(id__in=self.trees)
                .exclude(status__in=TERMINAL_STATUSES)
                .values_list("id", flat=True)
            )
            if not live:
                return
            root = self.rng.choice(live)
            try:
                runqueue.cancel(root, reason="chaos tree", actor="chaos")
            except runqueue.InvalidTransition:
                return  # it ended meanwhile
            ids = tree_ids(root)
            still = Run.objects.filter(id__in=ids).exclude(status__in=TERMINAL_STATUSES).count()
            self.tree_cancels.append((root, ids, still))

        retrying(go, "cancel tree")

    def send_signals(self) -> None:
        """Signal about half the signal runs not yet signalled: some before
        their first claim, some while they run, some while they wait."""

        def go() -> None:
            # A run the retention pass dropped (it finished unsignalled: a
            # fault cancelled or dead-lettered it) is gone; it gets no signal.
            unsent = self.signal_runs - set(self.signals_sent) - self.dropped
            for run_id in sorted(unsent, key=str):
                if self.rng.random() < 0.5:
                    self._signal(run_id)

        retrying(go, "signal")

    def _signal(self, run_id: Any) -> None:
        data = {"n": len(self.signals_sent)}
        try:
            runqueue.signal(run_id, SIGNAL, data)
        except runqueue.InvalidTransition:
            return  # cancelled or dead-lettered meanwhile: not sent
        self.signals_sent[run_id] = data

    def requeue_dead_parents(self) -> None:
        """An operator requeues the parents dead-lettered once on purpose
        (chaos.gather): each must resume once its children end."""

        def go() -> None:
            dead = Run.objects.filter(
                kind=KIND_GATHER, status="failed", failure__message=FAIL_ONCE
            ).values_list("id", flat=True)
            for run_id in dead:
                try:
                    leases.requeue(run_id, actor="chaos", reason="operator requeue")
                    self.counts.operator_requeues += 1
                except runqueue.RunqueueError:
                    pass  # another requeue or a cancel was first

        retrying(go, "requeue")

    def retention(self) -> None:
        """A retention pass with the clock two days on: every finished
        run whose tree is finished may go, a run with a live ancestor must
        stay. The submitted runs it dropped are left out of the figures
        that count runs (they ended before it), so a soak makes one pass,
        halfway: the other figures keep the runs of its second half."""

        # Read before the first try: a try that dropped days and then met
        # the database going away (a restart, a failover) is retried, and
        # what it dropped must still be counted.
        before = retrying(lambda: set(Run.objects.values_list("id", flat=True)), "retention")

        def go() -> None:
            partitions.prune(older_than_seconds=-2 * 86400)
            partitions.ensure()
            self.dropped |= before - set(Run.objects.values_list("id", flat=True))
            self.counts.retention_passes += 1

        retrying(go, "retention")

    def terminate_backends(self) -> None:
        def go() -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
                pids = [row[0] for row in cursor.fetchall()]
                chosen = self.rng.sample(pids, min(len(pids), self.rng.randint(1, 3)))
                for pid in chosen:
                    cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
                return len(chosen)

        self.counts.backend_terminations += retrying(go, "terminate backends")

    def restart(self) -> None:
        if self.restart_db is None:
            return
        self.restart_db()
        connection.close()
        self.counts.db_restarts += 1

    def fail_over(self) -> None:
        """The primary crashes mid-work; the standby, which holds every
        acknowledged commit (synchronous replication), takes over."""
        if self.failover is None:
            return
        promoted_at = self.failover()
        connection.close()
        self.counts.failovers += 1
        self.counts.promotions.append(promoted_at)

    def _database_faults(self, started: float) -> list[tuple[float, Callable[[], None]]]:
        """When, in the chaos window, the database itself fails: the
        profile's failovers spread evenly, else one restart halfway."""
        window = self.profile.chaos_seconds
        if self.failover is not None and self.profile.failovers:
            n = self.profile.failovers
            return [(started + window * (k + 1) / (n + 1), self.fail_over) for k in range(n)]
        return [(started + window / 2, self.restart)]

    # --- the run ---------------------------------------------------------------------

    def submit_until(self, total: int) -> None:
        """Submit runs until ``total`` have been: spread over the chaos window,
        so faults land on work in flight."""
        classes = [PriorityClass.INTERACTIVE, PriorityClass.ASYNC, PriorityClass.MAINTENANCE]

        p = self.profile

        def kind_and_payload(i: int) -> tuple[str, dict[str, Any]]:
            if i % p.fanout_every == 7:
                return KIND_FANOUT, {"children": p.fanout_children, "work_ms": 50}
            if i % p.signal_every == 3:
                return KIND_SIGNAL, {}
            if i % p.tree_every == 11:
                return KIND_TREE, {"depth": 2, "width": 3}
            if i % p.gather_every == 5:
                return KIND_GATHER, {"children": 3, "fail_once": i % (2 * p.gather_every) == 5}
            return KIND_ASYNC if i % 2 else KIND, {  # every other turn async
                "steps": self.rng.randint(1, 4),
                "work_ms": self.rng.randint(50, 400),
                "ask": self.rng.random() < 0.1,
                "stream": self.rng.random() < 0.5,
            }

        def one(i: int) -> Any:
            kind, payload = kind_and_payload(i)
            return runqueue.submit(
                kind=kind,
                payload=payload,
                session_id=f"chaos-{i}",
                priority=classes[i % 3],
                idempotency_key=f"chaos-{i}",
                concurrency_key=capped_key(i),
                budget=(BUDGET_KEY, self.rng.randint(100, 800)) if i % 3 == 0 else None,
            ).run.id

        while self.turns < total:
            i = self.turns
            run_id = retrying(lambda i=i: one(i), "submit")
            self.submitted.add(run_id)
            self.turns += 1
            kind, _ = kind_and_payload(i)
            if kind in (KIND, KIND_ASYNC) and i % p.double_text_every == 1:
                retrying(lambda i=i, kind=kind: self._double_text(i, kind), "double text")
            if kind == KIND_TREE:
                self.trees.append(run_id)
            if kind == KIND_SIGNAL:
                self.signal_runs.add(run_id)
                if self.rng.random() < 0.3:
                    retrying(lambda r=run_id: self._signal(r), "signal")  # before any claim

    def _double_text(self, i: int, kind: str) -> None:
        """A second message to turn i's session while it is busy (queued,
        running, maybe waiting for the user: then it is the answer), with a
        policy drawn from ON_BUSY; its run (if it made one) is submitted
        work like any other."""
        policy = self.rng.choice(ON_BUSY)
        n = self.counts.double_texts
        try:
            sub = runqueue.submit(
                kind=kind,
                payload={"steps": self.rng.randint(1, 2), "work_ms": self.rng.randint(50, 200)},
                session_id=f"chaos-{i}",
                priority=PriorityClass.INTERACTIVE,
                idempotency_key=f"chaos-{i}-double",
                on_busy=policy,
                start_within=self.rng.uniform(0.5, 3) if self.rng.random() < 1 / 3 else None,
                # A debounced burst: the turn waits a short window for more.
                debounce=self.rng.uniform(0.05, 0.3) if policy == "debounce" else None,
            )
        except runqueue.ActiveRunConflict:
            n["session_busy"] = n.get("session_busy", 0) + 1
            return
        except runqueue.SessionQueueFull:
            n["session_queue_full"] = n.get("session_queue_full", 0) + 1
            return
        n[sub.original_outcome] = n.get(sub.original_outcome, 0) + 1
        self.submitted.add(sub.run.id)

    def _watch_sessions(self) -> None:
        self.counts.double_actives_seen += retrying(
            lambda: len(testing.double_actives()), "sessions"
        )

    def deliver_inputs(self) -> None:
        def go() -> None:
            waiting = Run.objects.filter(status="waiting_for_user").values_list(
                "session_id", "kind"
            )
            for session_id, kind in waiting:
                runqueue.submit(kind=kind, session_id=session_id, payload={"answer": "yes"})
                self.counts.inputs_delivered += 1

        retrying(go, "deliver input")

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        for (key, cls), cap in CAPS.items():
            ConcurrencyLimit.objects.create(key=key, priority_class=cls, max_running=cap)
        Budget.objects.create(key=BUDGET_KEY, **BUDGET)
        try:
            self._faults_then_drain(started)
        finally:
            # Whatever happened: no worker outlives the soak (nor its database).
            self.stop_workers()
        kept = self.submitted - self.dropped
        result = retrying(lambda: figures(kept), "verify")
        result["runs_dropped_by_retention"] = len(self.submitted & self.dropped)
        result |= retrying(lambda: run_tree_figures(), "verify")
        result |= retrying(
            lambda: subagent_figures(self.signals_sent, self.tree_cancels), "verify"
        )
        result |= retrying(lambda: session_figures(self.counts.double_actives_seen), "verify")
        result |= self._fault_figures()
        result["seconds"] = round(time.monotonic() - started, 1)
        return result

    def _faults_then_drain(self, started: float) -> None:
        self.submit_until(self.profile.runs // 10)
        self.supervise()
        faults = [
            self.kill,
            self.kill,
            self.freeze,
            self.term,
            self.terminate_backends,
            self.cancel,
            self.cancel_tree,
            self.requeue_dead_parents,
        ]
        database_faults = self._database_faults(started)
        end = started + self.profile.chaos_seconds
        while time.monotonic() < end:
            time.sleep(self.rng.uniform(*self.profile.fault_every))  # the fault schedule
            if database_faults and time.monotonic() >= database_faults[0][0]:
                database_faults.pop(0)[1]()
            elif self._live():
                self.rng.choice(faults)()
            self.supervise()
            self.deliver_inputs()
            self.send_signals()
            self._watch_sessions()
            elapsed = (time.monotonic() - started) / self.profile.chaos_seconds
            if elapsed >= 0.5 and not self.counts.retention_passes:
                self.retention()  # once, halfway: trees in flight, half the runs finished
            self.submit_until(min(int(self.profile.runs * (0.1 + elapsed)), self.profile.runs))
        self.submit_until(self.profile.runs)
        drain_end = time.monotonic() + self.profile.drain_seconds
        while time.monotonic() < drain_end:
            self.supervise()
            self.deliver_inputs()
            self.send_signals()
            self.requeue_dead_parents()
            self._watch_sessions()
            if retrying(self._all_terminal, "drain"):
                break
            time.sleep(0.5)  # poll with a deadline

    def _all_terminal(self) -> bool:
        # Pending turns too: each must be queued, and run, once its session frees.
        if Run.objects.filter(id__in=self.submitted, status__in=LIVE_STATUSES).exists():
            return False
        return not Run.objects.filter(parent_id__isnull=False).active().exists()

    def _fault_figures(self) -> dict[str, Any]:
        reclaims = []
        for at, ids in self.kills:
            for run_id in ids:
                # A run a retention pass dropped since has no events to read.
                later = (
                    EventLog.objects.filter(run_id=run_id, type="run.claimed", created_at__gt=at)
                    .order_by("id")
                    .first()
                )
                if later is not None:
                    reclaims.append((later.created_at - at).total_seconds())
        c = self.counts
        pooler = {}
        if self.pooled is not None:
            pooler = {
                "pooler": "pgbouncer, pool_mode = transaction",
                "pooler_server_connections": self.pooled.pool_size,
                "worker_slots": slots_per_worker() * self.profile.workers,
            }
        return pooler | {
            "failovers": c.failovers,
            "promotion_to_first_claim_seconds": self._promotion_to_first_claim(),
            "worker_kills": c.kills,
            "worker_freezes": c.freezes,
            "worker_sigterms": c.terms,
            "backend_terminations": c.backend_terminations,
            "db_restarts": c.db_restarts,
            "worker_restarts": c.worker_restarts,
            "worker_exits_not_caused_by_the_soak": len(c.unasked_exits),
            "workers_that_exited_unasked": c.unasked_exits,
            "inputs_delivered": c.inputs_delivered,
            "runs_cancelled_by_the_fault": c.cancels,
            "operator_requeues_of_dead_parents": c.operator_requeues,
            "retention_passes": c.retention_passes,
            "double_texts": dict(sorted(c.double_texts.items())),
            "runs_in_flight_at_kills": sum(len(ids) for _, ids in self.kills),
            "runs_with_a_capped_key": Run.objects.filter(concurrency_key__in=CAPPED_KEYS).count(),
            "longest_kill_to_reclaim_seconds": round(max(reclaims), 2) if reclaims else None,
        }

    def _promotion_to_first_claim(self) -> list[float | None]:
        """Per failover, from the promotion to the first claim the new
        primary recorded (None: none before the next failover), both on the
        database's clock."""
        promotions = self.counts.promotions
        out: list[float | None] = []
        for k, at in enumerate(promotions):
            claims = EventLog.objects.filter(type="run.claimed", created_at__gt=at)
            if k + 1 < len(promotions):
                claims = claims.filter(created_at__lt=promotions[k + 1])
            first = claims.order_by("created_at").values_list("created_at", flat=True).first()
            out.append(None if first is None else round((first - at).total_seconds(), 2))
        return out


def new_database() -> str:
    return f"runqueue_chaos_{uuid.uuid4().hex[:8]}"
