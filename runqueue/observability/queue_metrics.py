"""The queue's Prometheus gauges, read from the database at scrape time,
and the view that serves them (the web side's one scrape URL).

Every read is bounded, never ``count(*)`` over the runs (Oban #1120): depth
per class and status through the partial indexes, exact up to ``CAP`` runs
per series and the planner's estimate above (as fresh as the table's
statistics); the oldest due run per class among the first ``HEAD`` due runs
in claim order; dead letters and unresolved uncertain tool invocations
through their partial indexes, capped. Three statements per scrape, and
``runqueue.reads.waiting``'s bounded reads of why due runs wait (paused kinds,
keys at their cap, budgets without room, classes without a worker).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import DatabaseError
from django.db.backends.utils import CursorWrapper
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runqueue import reads
from runqueue.capacity import budgets
from runqueue.conf import get_settings
from runqueue.models import (
    ACTIVE_STATUSES,
    PRIORITY_MAX,
    WAITING_REASONS,
    PausedKind,
    PriorityClass,
    RunStatus,
)
from runqueue.reads import waiting
from runqueue.sql import execute, without_jit

#: Counts stop here; above it, a series is the planner's estimate.
CAP = 10_000
#: The oldest due run is looked for among this many due runs per class.
HEAD = 1_000


@dataclass
class QueueFigures:
    """What one scrape read."""

    #: (class index, status) -> runs
    runs: dict[tuple[int, str], float] = field(default_factory=dict)
    oldest_due_seconds: list[float] = field(default_factory=lambda: [0.0] * len(PriorityClass))
    #: per class: a due run was found (among the first HEAD in claim order)
    any_due: list[bool] = field(default_factory=lambda: [False] * len(PriorityClass))
    dead_lettered: float = 0
    uncertain_tools: int = 0
    uncertain_runs: int = 0
    live_workers: int = 0


def _estimate(cursor: CursorWrapper, status: str, low: int, high: int) -> float:
    params = {"status": status, "low": low, "high": high}
    plan = execute(cursor, "metrics_estimate", params).fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


def read() -> QueueFigures:
    """The gauges, in three bounded statements (plus an EXPLAIN per capped series)."""
    figures = QueueFigures()
    stale = 3 * get_settings().HEARTBEAT_SECONDS
    with reads.bounded() as cursor:
        _live_runs(cursor, figures, CAP)
        dead, tools, runs, workers = execute(
            cursor, "metrics_totals", {"cap": CAP + 1, "stale_seconds": stale}
        ).fetchone()
        if dead > CAP:
            dead = max(_estimate(cursor, RunStatus.FAILED, 0, PRIORITY_MAX), CAP + 1)
    figures.dead_lettered = dead
    figures.uncertain_tools, figures.uncertain_runs, figures.live_workers = tools, runs, workers
    return figures


def live_runs(cap: int = CAP) -> QueueFigures:
    """The live runs per class and status, and the oldest due run's wait,
    alone (``runs`` and ``oldest_due_seconds``): the dashboard's depth, as
    bounded as the scrape's, exact up to ``cap`` per series."""
    figures = QueueFigures()
    with reads.bounded() as cursor:
        _live_runs(cursor, figures, cap)
    return figures


def _live_runs(cursor: CursorWrapper, figures: QueueFigures, cap: int) -> None:
    for idx, queued, oldest in execute(
        cursor, "metrics_queued", {"cap": cap + 1, "head": HEAD}
    ).fetchall():
        low, high = PriorityClass.by_index(idx).bounds
        if queued > cap:
            queued = max(_estimate(cursor, RunStatus.QUEUED, low, high), cap + 1)
        figures.runs[(idx, RunStatus.QUEUED)] = queued
        figures.oldest_due_seconds[idx] = max(float(oldest or 0), 0.0)
        figures.any_due[idx] = oldest is not None
    sampled: dict[str, dict[int, int]] = {}
    for status, idx, n in execute(
        cursor, "metrics_leased", {"cap": cap + 1, "waiting_reasons": list(WAITING_REASONS)}
    ).fetchall():
        sampled.setdefault(status, {})[idx] = n
    for status, per_class in sampled.items():
        total = sum(per_class.values())
        scale = 1.0
        if total > cap:
            # A capped read: split the estimated total as the sample is.
            scale = max(_estimate(cursor, status, 0, PRIORITY_MAX), total) / total
        for idx, n in per_class.items():
            figures.runs[(idx, status)] = n * scale


class QueueCollector(Collector):
    """Reads the queue at each scrape."""

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        figures = read()
        runs = GaugeMetricFamily(
            "runqueue_runs",
            f"Live runs (active, and sessions' pending turns) by priority class and "
            f"status: exact up to {CAP:,}, the planner's estimate above.",
            labels=["class", "status"],
        )
        for cls in PriorityClass:
            for status in (*ACTIVE_STATUSES, RunStatus.PENDING):
                runs.add_metric([cls.slug, str(status)], figures.runs.get((cls.index, status), 0))
        yield runs
        oldest = GaugeMetricFamily(
            "runqueue_oldest_due_seconds",
            f"How long the longest-waiting due queued run has waited, per class "
            f"(among the first {HEAD:,} due runs in claim order; 0 when none is due).",
            labels=["class"],
        )
        for cls in PriorityClass:
            oldest.add_metric([cls.slug], figures.oldest_due_seconds[cls.index])
        yield oldest
        yield GaugeMetricFamily(
            "runqueue_dead_lettered_runs",
            f"Failed runs (the dead letter): exact up to {CAP:,}, estimated above.",
            value=figures.dead_lettered,
        )
        yield GaugeMetricFamily(
            "runqueue_uncertain_tool_invocations",
            f"Uncertain tool invocations no one has resolved (capped at {CAP + 1:,}).",
            value=figures.uncertain_tools,
        )
        yield GaugeMetricFamily(
            "runqueue_uncertain_runs",
            "Runs with an unresolved uncertain tool invocation.",
            value=figures.uncertain_runs,
        )
        yield GaugeMetricFamily(
            "runqueue_live_workers",
            "Workers seen within three heartbeats and not stopped.",
            value=figures.live_workers,
        )
        yield from why_waiting()
        yield from budget_gauges()
        yield waiting_runs()
        if (source := reads.current()) is not None and source.replica:
            yield GaugeMetricFamily(
                "runqueue_read_lag_seconds",
                "How far behind the primary the replica these figures were read from "
                "was (RUNQUEUE['READ_DATABASE']; NaN: unknown). Absent: read from the primary.",
                value=float("nan") if source.lag is None else source.lag,
            )


def budget_gauges() -> Iterator[Metric]:
    """Each budget's window now (runqueue.capacity.budgets): one bounded read."""
    families = {
        name: GaugeMetricFamily(f"runqueue_budget_{name}", text, labels=["key"])
        for name, text in (
            ("tokens_used", "Tokens reserved (or settled) in the budget's window now."),
            ("tokens_limit", "Tokens the budget allows per window (absent: no limit)."),
            ("requests_used", "Calls reserved in the budget's window now."),
            ("requests_limit", "Calls the budget allows per window (absent: no limit)."),
            ("paused", "1 while the budget is paused (a provider's Retry-After), else 0."),
            (
                "waiting_runs",
                f"Queued runs whose call cannot be reserved now (counted up to "
                f"{budgets.COUNT_CAP:,}).",
            ),
        )
    }
    for window in budgets.windows():
        key = [window.key]
        families["tokens_used"].add_metric(key, window.used_tokens)
        families["requests_used"].add_metric(key, window.used_requests)
        if window.tokens is not None:
            families["tokens_limit"].add_metric(key, window.tokens)
        if window.requests is not None:
            families["requests_limit"].add_metric(key, window.requests)
        families["paused"].add_metric(key, 1 if window.paused_until else 0)
        families["waiting_runs"].add_metric(key, window.waiting)
    yield from families.values()


def waiting_runs() -> Metric:
    """Runs that wait by their own choice, by reason (runqueue.reads.waiting)."""
    gauge = GaugeMetricFamily(
        "runqueue_waiting_runs",
        "Runs waiting for their children, a signal, a time or the user, by reason "
        f"(counted up to {waiting.CAP + 1:,} each); they hold no worker slot.",
        labels=["reason"],
    )
    for reason, n in waiting.waiting_by_reason().items():
        gauge.add_metric([reason], n)
    return gauge


def why_waiting() -> Iterator[Metric]:
    """Why due runs wait (runqueue.reads.waiting): a few more bounded reads."""
    yield GaugeMetricFamily(
        "runqueue_paused_kinds",
        "Kinds paused (rows: a kind in one class or in every class).",
        value=PausedKind.objects.count(),
    )
    held = GaugeMetricFamily(
        "runqueue_due_runs_held",
        f"Due queued runs held back, per class and cause: paused_kind, key_at_cap "
        f"(a concurrency key at its cap), budget (a budget paused or without room in its "
        f"window for their call), no_worker (no live worker has a slot for the class), "
        f"no_handler (no live worker has their kind, or the version they are pinned to); "
        f"counted up to {waiting.CAP:,} per paused kind, key or budget, and among the "
        f"first {waiting.CAP:,} due runs of a class for no_handler.",
        labels=["class", "reason"],
    )
    totals: dict[tuple[str, str], int] = {
        (cls.slug, reason): 0 for cls in PriorityClass for reason in waiting.REASONS
    }
    capped_keys = dict.fromkeys((cls.slug for cls in PriorityClass), 0)
    for cause in waiting.causes():
        totals[(cause.cls.slug, cause.reason)] += cause.waiting
        if cause.reason == waiting.KEY_AT_CAP:
            capped_keys[cause.cls.slug] += 1
    for (cls_slug, reason), n in totals.items():
        held.add_metric([cls_slug, reason], n)
    yield held
    keys = GaugeMetricFamily(
        "runqueue_keys_at_cap",
        "Concurrency keys at their cap (or limited to 0) with due runs waiting, per class.",
        labels=["class"],
    )
    for cls_slug, n in capped_keys.items():
        keys.add_metric([cls_slug], n)
    yield keys


registry = CollectorRegistry(auto_describe=False)
registry.register(QueueCollector())


@require_GET
def view(request: HttpRequest) -> HttpResponse:
    """The web side's scrape URL: ``path("metrics", queue_metrics.view)``.

    With ``RUNQUEUE["METRICS_TOKEN"]`` set, a scrape needs
    ``Authorization: Bearer <token>``; without it the figures (counts, no
    tenant data) are open to whoever reaches the URL.
    """
    token = get_settings().METRICS_TOKEN
    if token is not None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        matches = hmac.compare_digest(given.strip().encode(), token.encode())
        if scheme.lower() != "bearer" or not matches:
            response = HttpResponse("metrics need the bearer token\n", status=401)
            response["WWW-Authenticate"] = 'Bearer realm="runqueue-metrics"'
            return response
    try:
        with reads.replica_reads() as source, without_jit(source.alias):
            body = generate_latest(registry)
    except DatabaseError:
        return HttpResponse("the database is unavailable\n", status=503)
    response = HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
    return reads.mark(response, source)
