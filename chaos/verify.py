"""What the chaos run must show, read back from the database after the drain."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import connection

from runqueue import events
from runqueue.models import TERMINAL_STATUSES, PriorityClass, Run, RunEvent, ToolInvocation

TERMINAL_EVENTS = ("run.succeeded", "run.failed", "run.cancelled")

#: Figures that must be zero for the run to pass.
MUST_BE_ZERO = (
    "runs_lost",
    "runs_with_several_terminal_events",
    "writes_by_fenced_epochs",
    "non_idempotent_effects_repeated",
    "cap_violations",
    "double_resumes",
    "lost_signals",
    "spawned_after_cancel",
    "descendants_left_running_by_a_cancel",
    "children_lost",
)


def _scalar(sql: str, params: list[Any] | None = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


def writes_by_fenced_epochs() -> int:
    """Events a worker wrote with an epoch already superseded in the run's
    log (run.fenced, which records the stale epoch on purpose, aside)."""
    bad = 0
    highest: dict[Any, int] = {}
    for run_id, type_, epoch in RunEvent.objects.order_by("id").values_list(
        "run_id", "type", "lease_epoch"
    ):
        if type_ == "run.fenced":
            continue
        if epoch < highest.get(run_id, 0):
            bad += 1
        highest[run_id] = max(highest.get(run_id, 0), epoch)
    return bad


def cap_violations(cap: Any) -> tuple[int, dict[str, int]]:
    """Claims that took a (key, class) past its cap, replayed from the event
    log alone (no trigger, no counter): each run.claimed puts its run among
    the running runs of its key and class, any other event that moves a
    status takes it out. Events are replayed in id order; a transition's
    event is written in its own transaction, before its commit, so a claim
    made possible by a run ending always comes after that run's event.

    ``cap(key, priority_class)`` is the cap in force (None: no cap). Returns
    the number of violating claims and the highest count seen per
    "key/class" that has a cap.
    """
    running: dict[tuple[str, PriorityClass], set[Any]] = {}
    where: dict[Any, tuple[str, PriorityClass]] = {}
    caps: dict[tuple[str, PriorityClass], int | None] = {}
    violations = 0
    peak: dict[str, int] = {}
    rows = (
        RunEvent.objects.filter(type__in=list(events.STATUS_OF))
        .order_by("id")
        .values_list("run_id", "type", "run__concurrency_key", "run__priority")
    )
    for run_id, type_, key, priority in rows.iterator(chunk_size=5000):
        previous = where.pop(run_id, None)
        if previous is not None:
            running[previous].discard(run_id)
        if type_ != events.CLAIMED:
            continue
        pair = (key, PriorityClass.of(priority))
        if pair not in caps:
            caps[pair] = cap(*pair)
        where[run_id] = pair
        members = running.setdefault(pair, set())
        members.add(run_id)
        if caps[pair] is not None:
            label = f"{key}/{pair[1].name.lower()}"
            peak[label] = max(peak.get(label, 0), len(members))
            if len(members) > caps[pair]:
                violations += 1
    return violations, peak


def tree_ids(root: Any) -> set[Any]:
    """A run and every run below it."""
    found, level = {root}, [root]
    while level:
        level = list(Run.objects.filter(parent_id__in=level).values_list("id", flat=True))
        found.update(level)
    return found


def subagent_figures(
    signals_sent: dict[Any, Any], tree_cancels: list[tuple[Any, set[Any], int]]
) -> dict[str, Any]:
    """The fan-in resumed each waiting parent once (``double_resumes``:
    run.resumed events for children beyond the first, per parent); every
    signal sent reached its run's wait (``lost_signals``: signalled runs
    that did not finish with the signal's data, cancelled and dead-lettered
    ones aside); no run was spawned under a tree after its cancel committed
    (``spawned_after_cancel``), and the cancel left none of it running."""
    resumes = Counter(
        RunEvent.objects.filter(type=events.RESUMED, data__reason="children").values_list(
            "run_id", flat=True
        )
    )
    lost = 0
    runs = {r.id: r for r in Run.objects.filter(id__in=list(signals_sent))}
    for run_id, data in signals_sent.items():
        run = runs.get(run_id)
        if run is None or run.status in ("cancelled", "failed"):
            continue
        if run.status != "succeeded" or run.result != {"input": data, "timed_out": False}:
            lost += 1
    after = sum(len(tree_ids(root) - at_cancel) for root, at_cancel, _open in tree_cancels)
    children = Run.objects.filter(parent_id__isnull=False)
    return {
        "parents_resumed": len(resumes),
        "double_resumes": sum(n - 1 for n in resumes.values() if n > 1),
        "children_spawned": children.count(),
        "children_lost": children.exclude(status__in=TERMINAL_STATUSES).count(),
        "signals_sent": len(signals_sent),
        "lost_signals": lost,
        "tree_cancels": len(tree_cancels),
        "tree_runs_at_cancel": sum(len(ids) for _root, ids, _open in tree_cancels),
        "spawned_after_cancel": after,
        "descendants_left_running_by_a_cancel": sum(n for _r, _ids, n in tree_cancels),
    }


def figures(submitted: set[Any]) -> dict[str, Any]:
    runs = dict(Run.objects.values_list("id", "status"))
    terminal_events = Counter(
        RunEvent.objects.filter(type__in=TERMINAL_EVENTS).values_list("run_id", flat=True)
    )
    repeated = _scalar(
        "SELECT count(*) FROM (SELECT key FROM chaos_ledger WHERE idempotency = %s"
        " GROUP BY key HAVING count(*) > 1) x",
        ["non_idempotent"],
    )
    idempotent_repeats = _scalar(
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM chaos_ledger"
        " WHERE idempotency = %s GROUP BY key) x",
        ["idempotent"],
    )
    attempts = Counter(Run.objects.filter(id__in=submitted).values_list("attempts", flat=True))
    statuses = Counter(runs[r] for r in submitted if r in runs)
    from runqueue import concurrency

    violations, peaks = cap_violations(concurrency.cap_for)
    return {
        "runs_submitted": len(submitted),
        "runs_terminal": sum(1 for r in submitted if runs.get(r) in TERMINAL_STATUSES),
        "runs_lost": sum(1 for r in submitted if runs.get(r) not in TERMINAL_STATUSES),
        "runs_by_status": dict(sorted(statuses.items())),
        "runs_with_several_terminal_events": sum(1 for n in terminal_events.values() if n > 1),
        "writes_by_fenced_epochs": writes_by_fenced_epochs(),
        "run_fenced_events": RunEvent.objects.filter(type="run.fenced").count(),
        "non_idempotent_effects": _scalar(
            "SELECT count(*) FROM chaos_ledger WHERE idempotency = 'non_idempotent'"
        ),
        "non_idempotent_effects_repeated": repeated,
        "tool_invocations_uncertain": ToolInvocation.objects.filter(status="uncertain").count(),
        "idempotent_tool_reruns": int(idempotent_repeats),
        "attempts_distribution": {str(k): v for k, v in sorted(attempts.items())},
        "cap_violations": violations,
        "peak_running_per_capped_key": peaks,
        "dead_lettered": statuses.get("failed", 0),
        "dead_lettered_by_cause": dict(
            Counter(
                f"{f['classification']}:{f['error_type']}"
                for f in Run.objects.filter(id__in=submitted, status="failed").values_list(
                    "failure", flat=True
                )
            )
        ),
    }
