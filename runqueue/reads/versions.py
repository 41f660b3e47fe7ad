"""Kinds and versions on the dashboard: which live workers claim each
kind and version, how many runs of each are queued, running and waiting,
and the due runs no live worker claims (a kind no worker has, or a version
no worker has that its runs are pinned to). An operator stops a worker of
an old version once no run is pinned to that version (docs/decisions/run-trees.md,
"Versions and rolling deploys").

The counts are one bounded read of the active runs, at most ``CAP`` per
status in an index's order (as the dashboard's depth and the scrape are);
the held runs are read from the head of each class's due runs, as the
other causes' are (``runqueue.reads.waiting``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.db.models import QuerySet
from django.db.models.functions import Now

from runqueue import reads
from runqueue.conf import get_settings
from runqueue.models import (
    WAIT_STATUSES,
    WAITING_REASONS,
    PriorityClass,
    Run,
    RunStatus,
    Worker,
)
from runqueue.sql import execute

#: Live workers read, at most (as ``runqueue.reads.waiting.MOST``).
MOST = 100
#: Active runs read per status for the counts, at most: a sample this size
#: splits a status's total among kinds and versions.
CAP = 1_000


@dataclass(frozen=True, slots=True)
class Handlers:
    """What one live worker claims (its row's ``kinds``)."""

    worker: str
    kinds: Mapping[str, frozenset[int]]
    #: {(kind, pinned version): the version it moves such runs to, between turns}
    moves: Mapping[tuple[str, int], int]

    @classmethod
    def of(cls, worker: str, row: object) -> Handlers:
        """From a worker row's ``kinds`` (anything else: no kinds)."""
        kinds: dict[str, frozenset[int]] = {}
        moves: dict[tuple[str, int], int] = {}
        for kind, entry in (row if isinstance(row, dict) else {}).items():
            if not isinstance(entry, dict):
                continue
            kinds[kind] = frozenset(v for v in entry.get("versions", ()) if isinstance(v, int))
            for old, new in (entry.get("moves") or {}).items():
                if str(old).isdigit() and isinstance(new, int):
                    moves[(kind, int(old))] = new
        return cls(worker=worker, kinds=kinds, moves=moves)


def live_workers() -> QuerySet[Worker]:
    """Workers seen within three heartbeats and not stopped."""
    stale = dt.timedelta(seconds=3 * get_settings().HEARTBEAT_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, last_seen_at__gte=Now() - stale)


def live_handlers() -> list[Handlers]:
    """The live workers' kinds (the first MOST, by id)."""
    rows = live_workers().order_by("id").values_list("id", "kinds")[:MOST]
    return [Handlers.of(worker, kinds) for worker, kinds in rows]


@dataclass(slots=True)
class KindVersion:
    """One row of the dashboard's kinds and versions: a kind's runs pinned
    to ``version`` (None: not claimed yet), and who claims them."""

    kind: str
    version: int | None
    queued: int = 0
    running: int = 0
    waiting: int = 0
    #: Live workers that claim these runs as they are.
    workers: list[str] = field(default_factory=list)
    #: Live workers that move them, between turns, to a version: "w (to v2)".
    movers: list[str] = field(default_factory=list)

    @property
    def active(self) -> int:
        return self.queued + self.running + self.waiting

    @property
    def words(self) -> str:
        """What an operator should know, or ""."""
        if self.workers:
            return ""
        if self.version is None:
            return "no live worker has this kind"
        if self.movers:
            return (
                f"no live worker has version {self.version}; runs between turns move to a "
                "newer version, runs in the middle of a turn wait for this one"
            )
        return f"no live worker has version {self.version}, which these runs are pinned to"


def served_by(workers: Iterable[Handlers], kind: str, version: int | None) -> list[str]:
    """The workers that claim runs of ``kind`` pinned to ``version`` as they
    are (None: not claimed yet, any worker with the kind)."""
    return [
        w.worker
        for w in workers
        if kind in w.kinds and (version is None or version in w.kinds[kind])
    ]


def moved_by(workers: Iterable[Handlers], kind: str, version: int | None) -> list[str]:
    """The workers that take such runs between turns, to a newer version."""
    if version is None:
        return []
    return [
        f"{w.worker} (to v{w.moves[(kind, version)]})"
        for w in workers
        if (kind, version) in w.moves
    ]


def table(
    workers: list[Handlers] | None = None, totals: Mapping[str, float] | None = None
) -> list[KindVersion]:
    """Every kind and version with active runs or a live worker, by kind
    then version (not claimed yet first); ``workers``: the live workers'
    handlers, when read already. Counts are exact up to ``CAP`` runs per
    status; above it, a sample of the status's runs scaled to its total in
    ``totals`` (the dashboard's depth, by status), else a floor."""
    workers = live_handlers() if workers is None else workers
    rows: dict[tuple[str, int | None], KindVersion] = {}

    def row(kind: str, version: int | None) -> KindVersion:
        if (kind, version) not in rows:
            rows[(kind, version)] = KindVersion(kind, version)
        return rows[(kind, version)]

    sampled: dict[str, list[tuple[str, int | None, int]]] = {}
    # In the capped reads' scope: with the cap near a status's runs the
    # planner would read them all by bitmap and sort, not walk the index.
    with reads.bounded() as cursor:
        for status, kind, version, n in execute(
            cursor,
            "active_by_handler",
            {"cap": CAP + 1, "waiting_reasons": list(WAITING_REASONS)},
        ).fetchall():
            sampled.setdefault(status, []).append((kind, version, n))
    for status, counts in sampled.items():
        read = sum(n for _k, _v, n in counts)
        total = (totals or {}).get(status, read)
        scale = max(total, read) / read if read > CAP else 1.0
        for kind, version, n in counts:
            kv = row(kind, version)
            if status == RunStatus.QUEUED:
                kv.queued += round(n * scale)
            elif status == RunStatus.RUNNING:
                kv.running += round(n * scale)
            elif status in WAIT_STATUSES:
                kv.waiting += round(n * scale)
    for w in workers:
        for kind, numbers in w.kinds.items():
            for number in numbers:
                row(kind, number)
    for (kind, version), kv in rows.items():
        kv.workers = served_by(workers, kind, version)
        kv.movers = moved_by(workers, kind, version)
    return sorted(rows.values(), key=lambda kv: (kv.kind, kv.version or 0))


@dataclass(frozen=True, slots=True)
class Held:
    """Due runs of a class no live worker claims: their kind, or the version
    they are pinned to, is no live worker's."""

    cls: PriorityClass
    subject: str
    n: int
    #: The class's first ``cap`` due runs were all read: ``n`` is a floor.
    floor: bool
    detail: str


def held(cap: int) -> list[Held]:
    """The due runs no live worker claims, per class, kind and version,
    among the first ``cap`` due runs of each class (``due_by_handler``)."""
    workers = live_handlers()
    if not workers:
        return []  # no live worker at all: the classes' cause says so
    with reads.read_connection().cursor() as cursor:
        rows = execute(cursor, "due_by_handler", {"cap": cap}).fetchall()
    found = []
    for idx, kind, version, n, between_turns, sampled in rows:
        if served_by(workers, kind, version):
            continue
        movers = moved_by(workers, kind, version)
        # A mover takes the runs between turns; the others wait.
        waiting = n - between_turns if movers else n
        if not waiting:
            continue
        if version is None:
            subject, words = kind, f"no live worker has kind {kind}"
        else:
            subject = f"{kind} v{version}"
            words = (
                f"no live worker has version {version} of kind {kind}, which they are pinned to"
            )
            if movers:
                words += f" ({', '.join(movers)} takes those between turns)"
        found.append(Held(PriorityClass.by_index(idx), subject, waiting, sampled >= cap, words))
    return found


def why(run: Run) -> str | None:
    """Why no live worker claims this queued run, in the dashboard's words,
    or None."""
    workers = live_handlers()
    if served_by(workers, run.kind, run.handler_version):
        return None
    if run.handler_version is None:
        return f"No live worker has kind {run.kind}: the run waits for one that has it."
    movers = moved_by(workers, run.kind, run.handler_version)
    words = (
        f"No live worker has version {run.handler_version} of kind {run.kind}, which the "
        "run is pinned to"
    )
    if movers:
        words += f"; {', '.join(movers)} takes it once it is between turns"
    return words + "."


def worker_kinds(row: object) -> str:
    """A worker row's ``kinds`` in a line: "a v1,v2 (1 to 2) · b v1"."""
    handlers = Handlers.of("", row)
    parts = []
    for kind in sorted(handlers.kinds):
        versions = ",".join(f"v{v}" for v in sorted(handlers.kinds[kind]))
        moves = [
            f"{old} to {new}" for (k, old), new in sorted(handlers.moves.items()) if k == kind
        ]
        parts.append(f"{kind} {versions}" + (f" ({', '.join(moves)})" if moves else ""))
    return " · ".join(parts) or "-"
