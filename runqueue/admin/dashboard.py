"""The queue dashboard: what is stuck, how fast claims are, who is working.

Every number is one bounded, indexed read: queue depth and the oldest due
run are the Prometheus scrape's statements (exact up to ``DEPTH_CAP`` runs per
class and status, the planner's estimate above; the oldest among the first
``queue_metrics.HEAD`` due runs of a class), the kinds and versions table
samples as many (``runqueue.reads.versions``), throughput reads the
hour's finished runs once (``dashboard_hour``), which also give the hour's
dead letters and, with the ``run.claimed`` event rows and the running runs'
claims (a range of the leased index), the claim latency; the slot holders
are that index's head, uncertain invocations their partial index.
No query scans every run. Claim latency and the oldest due run's wait both
count from when the run last became due (created, or ``scheduled_for``,
which a requeue, an input delivery, a shutdown release or a retry's backoff
set), never from its creation alone, so a requeued old run does not read as
a slow claim.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import (
    CharField,
    DurationField,
    ExpressionWrapper,
    F,
    Value,
)
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from runqueue import db, reads
from runqueue.admin import display, permissions, svg
from runqueue.capacity import budgets
from runqueue.conf import get_settings
from runqueue.models import (
    ACTIVE_STATUSES,
    PriorityClass,
    Run,
    RunStatus,
    ToolInvocation,
    ToolStatus,
    Worker,
)
from runqueue.observability import queue_metrics
from runqueue.reads import versions, waiting
from runqueue.sql import execute

WINDOW = dt.timedelta(hours=1)
#: The depth, the dead letters and the waiting runs are exact up to this many
#: runs per series, the planner's estimate (or "> N") above: as many as the
#: causes and versions tables read. The scrape counts to ten times more;
#: 10,001 running runs took it 23-36 ms at ten million runs.
DEPTH_CAP = waiting.CAP
CLASSES = list(PriorityClass)
#: The statuses' colours are the badges' (one palette); the latency bars' own.
#: The live runs the depth counts: the active ones and a session's pending
#: turns (on_busy "enqueue"), which wait for its active run to end.
DEPTH_STATUSES: tuple[str, ...] = (*ACTIVE_STATUSES, RunStatus.PENDING)
COLOURS: dict[str, str] = {
    **display.STATUS_COLOURS,
    "p50": "#417690",
    "p99": "#ba2121",
}


@dataclass(slots=True)
class ClassStats:
    """One priority class's row on the dashboard."""

    cls: PriorityClass
    depth: dict[str, int] = field(default_factory=dict)
    #: The statuses whose depth is the planner's estimate (over the cap).
    estimated: set[str] = field(default_factory=set)
    oldest_due: str = "-"
    claims: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None


def since() -> dt.datetime:
    """The window's start as a value, not ``now()``: the planner prunes
    the day partitions before the hour when it plans, not while it runs
    (planning every day's partition cost more than reading the hour)."""
    return timezone.now() - WINDOW


@dataclass(slots=True)
class Hour:
    """The last hour, from one statement (``dashboard_hour``): the claims'
    latency per class, and the runs finished per minute by status."""

    #: (class index, claims, p50 ms, p99 ms)
    latency: list[tuple[int, int, float, float]]
    #: minute -> terminal status -> runs
    finished: dict[dt.datetime, dict[str, int]]

    @classmethod
    def read(cls) -> Hour:
        hour = cls(latency=[], finished={})
        with reads.read_connection().cursor() as cursor:
            for ci, minute, status, n, p50, p99 in execute(
                cursor, "dashboard_hour", {"since": since()}
            ).fetchall():
                if minute is None:
                    hour.latency.append((ci, n, p50, p99))
                else:
                    hour.finished.setdefault(minute, {})[status] = n
        return hour


def class_stats(hour: Hour | None = None) -> list[ClassStats]:
    """Depth by status, oldest due run, and claim latency, per class."""
    stats = [ClassStats(cls=c) for c in CLASSES]
    # The scrape's bounded reads: exact up to DEPTH_CAP runs per
    # class and status, the planner's estimate above (a count of every live
    # run grows with the runs waiting for their user); the oldest due run
    # among the first queue_metrics.HEAD due runs of its class.
    figures = queue_metrics.live_runs(DEPTH_CAP)
    for (ci, status), n in figures.runs.items():
        if n:
            stats[ci].depth[status] = round(n)
            if n > DEPTH_CAP:
                stats[ci].estimated.add(status)
    for ci, due in enumerate(figures.any_due):
        if due:
            seconds = figures.oldest_due_seconds[ci]
            stats[ci].oldest_due = display.duration(dt.timedelta(seconds=seconds))
    for ci, n, p50, p99 in (hour or Hour.read()).latency:
        stats[ci].claims = n
        stats[ci].p50_ms, stats[ci].p99_ms = p50, p99
    return stats


def throughput(hour: Hour | None = None) -> list[tuple[dt.datetime, dict[str, int]]]:
    """Runs finished per minute over the last hour, by terminal status."""
    finished = (hour or Hour.read()).finished
    end = timezone.now().replace(second=0, microsecond=0)
    minutes = [end - dt.timedelta(minutes=i) for i in range(59, -1, -1)]
    return [(m, finished.get(m, {})) for m in minutes]


def totals(hour: Hour | None = None) -> dict[str, int]:
    """Dead letters and uncertain runs: what needs a human. The hour's dead
    letters are the hour's failed runs, which ``Hour`` counted per minute."""
    unresolved = ToolInvocation.objects.filter(
        status=ToolStatus.UNCERTAIN, resolution__isnull=True
    )
    finished = (hour or Hour.read()).finished
    return {
        "dead_lettered_hour": sum(c.get(RunStatus.FAILED, 0) for c in finished.values()),
        "dead_lettered": db.capped_count(Run.objects.dead_lettered(), DEPTH_CAP),
        "uncertain_runs": unresolved.values("run_id").distinct().count(),
        "uncertain_tools": unresolved.count(),
    }


def live_workers() -> Sequence[Worker]:
    """Workers that reported within three heartbeats and have not stopped."""
    stale = dt.timedelta(seconds=3 * get_settings().HEARTBEAT_SECONDS)
    workers = list(
        Worker.objects.filter(stopped_at__isnull=True, last_seen_at__gte=Now() - stale)
        .annotate(
            seen_ago=ExpressionWrapper(Now() - F("last_seen_at"), DurationField()),
            kinds_line=Value("", output_field=CharField()),
        )
        .order_by("id")[:100]
    )
    for worker in workers:
        worker.seen_ago = display.duration(worker.seen_ago)
        worker.kinds_line = versions.worker_kinds(worker.kinds)
    return workers


def charts(stats: list[ClassStats], buckets: list[tuple[dt.datetime, dict[str, int]]]) -> dict:
    """The three SVG charts."""
    depth = svg.hbars(
        [
            svg.Bar(
                label=s.cls.label,
                segments=tuple(
                    svg.Segment(
                        name=RunStatus(st).label, value=s.depth.get(st, 0), colour=COLOURS[st]
                    )
                    for st in DEPTH_STATUSES
                ),
            )
            for s in stats
        ],
        title="Queue depth by class",
    )
    latency = svg.hbars(
        [
            svg.Bar(
                label=f"{s.cls.label} {q}",
                segments=(
                    svg.Segment(name=q, value=getattr(s, f"{q}_ms") or 0, colour=COLOURS[q]),
                ),
            )
            for s in stats
            for q in ("p50", "p99")
        ],
        title="Claim latency, last hour",
        unit=" ms",
    )
    finished = svg.columns(
        [
            (
                timezone.localtime(minute).strftime("%H:%M"),
                tuple(
                    svg.Segment(name=RunStatus(st).label, value=counts.get(st, 0), colour=c)
                    for st, c in (
                        (RunStatus.SUCCEEDED, COLOURS[RunStatus.SUCCEEDED]),
                        (RunStatus.FAILED, COLOURS[RunStatus.FAILED]),
                        (RunStatus.CANCELLED, COLOURS[RunStatus.CANCELLED]),
                    )
                ),
            )
            for minute, counts in buckets
        ],
        title="Runs finished per minute, last hour",
    )
    return {"depth": depth, "latency": latency, "throughput": finished}


def _by_status(stats: list[ClassStats]) -> dict[str, float]:
    """The depth's runs per status, every class together."""
    totals: dict[str, float] = {}
    for s in stats:
        for status, n in s.depth.items():
            totals[status] = totals.get(status, 0) + n
    return totals


def view(model_admin: ModelAdmin, request: HttpRequest) -> HttpResponse:
    """The dashboard page; staff who may view runs may view it."""
    if not permissions.may_view(request):
        raise PermissionDenied
    hour = Hour.read()
    stats = class_stats(hour)
    buckets = throughput(hour)
    workers = live_workers()
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Run queue dashboard",
        "opts": model_admin.opts,
        "stats": stats,
        "totals": totals(hour),
        "finished_hour": sum(sum(c.values()) for _m, c in buckets),
        "workers": workers,
        "causes": waiting.causes(),
        "any_due": any(s.oldest_due != "-" for s in stats),
        "budgets": budgets.windows(),
        "waiting_by_reason": waiting.waiting_by_reason(DEPTH_CAP),
        "holders": waiting.slot_holders(),
        "kind_versions": versions.table(
            [versions.Handlers.of(w.id, w.kinds) for w in workers], _by_status(stats)
        ),
        "charts": charts(stats, buckets),
        "stats_estimated": any(s.estimated for s in stats),
        "depth_cap": DEPTH_CAP,
    }
    return TemplateResponse(request, "admin/runqueue/run/dashboard.html", context)
