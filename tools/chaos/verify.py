"""What the chaos run must show, read back from the database after the drain."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from django.db import connection

from runqueue import events
from runqueue.models import TERMINAL_STATUSES, EventLog, PriorityClass, Run, ToolInvocation

TERMINAL_EVENTS = ("run.succeeded", "run.failed", "run.cancelled")

#: Figures that must be zero for the run to pass.
MUST_BE_ZERO = (
    "runs_lost",
    "runs_with_several_terminal_events",
    "writes_by_fenced_epochs",
    "non_idempotent_effects_repeated",
    "cap_violations",
    "stream_mismatches",
    "budget_overruns",
    "double_resumes",
    "lost_signals",
    "spawned_after_cancel",
    "descendants_left_running_by_a_cancel",
    "children_lost",
    "orphan_rows",
    "stuck_waiting",
    "replay_mismatches",
    "descendants_lost",
    "children_open_mismatches",
    "sessions_with_two_active_runs",
    "pending_turns_never_promoted",
    "turns_promoted_twice",
)

#: And for the failover profile: workers ride through a failover on their own
#: (a worker that ended although the soak neither killed nor SIGTERMed it).
MUST_BE_ZERO_ACROSS_FAILOVERS = ("worker_exits_not_caused_by_the_soak",)


def _scalar(sql: str, params: list[Any] | None = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


def writes_by_fenced_epochs() -> int:
    """Events a worker wrote with an epoch already superseded in the run's
    log (run.fenced, which records the stale epoch on purpose, aside)."""
    bad = 0
    highest: dict[Any, int] = {}
    for run_id, type_, epoch in EventLog.objects.order_by("id").values_list(
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
        EventLog.objects.filter(type__in=list(events.STATUS_OF))
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


def stream_mismatches(submitted: set[Any]) -> tuple[int, int]:
    """(succeeded turns that streamed text, those whose text as a client
    assembles it from the durable events differs from the result). A
    client writes each run.text at its offset and starts afresh at each
    run.claimed, so the last turn's text is what follows the last claim."""
    results = {
        run_id: result["text"]
        for run_id, result in Run.objects.filter(id__in=submitted, status="succeeded").values_list(
            "id", "result"
        )
        if isinstance(result, dict) and "text" in result
    }
    texts: dict[Any, list[str | None]] = {}
    rows = (
        EventLog.objects.filter(run_id__in=list(results), type__in=["run.claimed", "run.text"])
        .order_by("run_id", "id")
        .values_list("run_id", "type", "data")
    )
    for run_id, type_, data in rows.iterator(chunk_size=2000):
        if type_ == "run.claimed":
            texts[run_id] = []
            continue
        chars = texts.setdefault(run_id, [])
        end = data["offset"] + len(data["text"])
        chars.extend([None] * (end - len(chars)))
        chars[data["offset"] : end] = data["text"]
    bad = 0
    for run_id, expected in results.items():
        chars = texts.get(run_id, [])
        got = None if None in chars else "".join(chars)  # type: ignore[arg-type]
        bad += got != expected
    return len(results), bad


def budget_charges() -> dict[str, list[tuple[float, int]]]:
    """Every call reserved on each budget, (when, tokens), from the event log
    alone: a claim of a run whose declared call (run.created, or a requeue
    waiting for a budget) it reserved, and each budget.reserved; at what the
    call used once settled (budget.settled: a lease settles its oldest open
    reservation of the key, and a new claim starts a new lease); a call
    refunded (budget.refunded: its run given back unstarted) was never
    made and counts nothing."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT run_id, type, extract(epoch FROM created_at), data FROM runqueue_event_log"
            " WHERE type IN ('run.created', 'run.requeued', 'run.claimed', 'budget.reserved',"
            " 'budget.settled', 'budget.refunded') ORDER BY id"
        )
        rows = cursor.fetchall()
    declared: dict[Any, dict[str, Any]] = {}
    held: dict[Any, list[list[Any]]] = {}
    charges: dict[str, list[list[Any]]] = {}

    def charge(run_id: Any, key: str, at: float, tokens: int) -> None:
        entry = [key, float(at), tokens]
        charges.setdefault(key, []).append(entry)
        held.setdefault(run_id, []).append(entry)

    for run_id, type_, at, text in rows:
        data = json.loads(text) if isinstance(text, str) else text
        if type_ in ("run.created", "run.requeued") and "budget" in data:
            declared[run_id] = data["budget"]
        elif type_ == "run.claimed":
            held[run_id] = []
            if run_id in declared:
                charge(run_id, declared[run_id]["key"], at, declared[run_id]["tokens"])
        elif type_ == "budget.reserved":
            charge(run_id, data["key"], at, data["tokens"])
        elif type_ == "budget.settled":
            entry = next(e for e in held[run_id] if e[0] == data["key"])
            held[run_id].remove(entry)
            entry[2] = data["used"]
        elif type_ == "budget.refunded":
            entry = next(e for e in held[run_id] if e[0] == data["key"])
            held[run_id].remove(entry)
            charges[data["key"]].remove(entry)
    return {
        key: sorted((at, tokens) for _k, at, tokens in entries) for key, entries in charges.items()
    }


def budget_overruns(limits: Any) -> tuple[int, dict[str, tuple[int, int]]]:
    """Calls reserved past a budget: replayed from the log (budget_charges),
    a call counts when the window of ``per_seconds`` ending at it holds more
    tokens or calls than the budget allows. ``limits(key)`` is (tokens,
    requests, per_seconds) or None. Returns the count and, per key, the most
    tokens and calls any window held."""
    overruns, worst = 0, {}
    for key, charges in budget_charges().items():
        limit = limits(key)
        if limit is None:
            continue
        tokens_limit, requests_limit, per_seconds = limit
        start = total = most_tokens = most_calls = 0
        for end, (at, tokens) in enumerate(charges):
            total += tokens
            while charges[start][0] <= at - per_seconds:
                total -= charges[start][1]
                start += 1
            calls = end - start + 1
            most_tokens, most_calls = max(most_tokens, total), max(most_calls, calls)
            if (tokens_limit is not None and total > tokens_limit) or (
                requests_limit is not None and calls > requests_limit
            ):
                overruns += 1
        worst[key] = (most_tokens, most_calls)
    return overruns, worst


def _budget_limits(key: str) -> tuple[int | None, int | None, int] | None:
    from runqueue.models import Budget

    row = Budget.objects.filter(key=key).values_list("tokens", "requests", "per_seconds").first()
    return None if row is None else row


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
        EventLog.objects.filter(type=events.RESUMED, data__reason="children").values_list(
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
        EventLog.objects.filter(type__in=TERMINAL_EVENTS).values_list("run_id", flat=True)
    )
    # An operator's requeue of a dead letter starts the run's life again:
    # one terminal event more is its due, not a second end of one life.
    terminal_events.subtract(
        Counter(
            EventLog.objects.filter(type=events.OPERATOR_REQUEUED).values_list("run_id", flat=True)
        )
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
    from runqueue.capacity import concurrency

    violations, peaks = cap_violations(concurrency.cap_for)
    streamed, mismatched = stream_mismatches(submitted)
    overruns, worst_windows = budget_overruns(_budget_limits)
    return {
        "streamed_turns_checked": streamed,
        "stream_mismatches": mismatched,
        "runs_submitted": len(submitted),
        "runs_terminal": sum(1 for r in submitted if runs.get(r) in TERMINAL_STATUSES),
        "runs_lost": sum(1 for r in submitted if runs.get(r) not in TERMINAL_STATUSES),
        "runs_by_status": dict(sorted(statuses.items())),
        "runs_with_several_terminal_events": sum(1 for n in terminal_events.values() if n > 1),
        "writes_by_fenced_epochs": writes_by_fenced_epochs(),
        "run_fenced_events": EventLog.objects.filter(type="run.fenced").count(),
        "non_idempotent_effects": _scalar(
            "SELECT count(*) FROM chaos_ledger WHERE idempotency = 'non_idempotent'"
        ),
        "non_idempotent_effects_repeated": repeated,
        "tool_invocations_uncertain": ToolInvocation.objects.filter(status="uncertain").count(),
        "idempotent_tool_reruns": int(idempotent_repeats),
        "attempts_distribution": {str(k): v for k, v in sorted(attempts.items())},
        "cap_violations": violations,
        "peak_running_per_capped_key": peaks,
        "budget_overruns": overruns,
        "budget_worst_window_tokens_calls": worst_windows,
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


def run_tree_figures() -> dict[str, Any]:
    """The run tree's invariants after the drain (runqueue.testing, the
    ones the model-checked state machine keeps): no row outlives its run
    (``orphan_rows``), no run is left waiting (``stuck_waiting``: every
    wake-up was given, so a run still waiting never ends), no gathered call
    got another call's record (``replay_mismatches``, from chaos.gather's
    results), a live run's descendants all exist, every live parent's
    count of open children is right."""
    from runqueue import testing
    from tools.chaos.handlers import KIND_GATHER

    orphans = testing.orphan_rows()
    gathered = Run.objects.filter(kind=KIND_GATHER, status="succeeded").values_list(
        "result", flat=True
    )
    return {
        "orphan_rows": sum(orphans.values()),
        "orphan_rows_by_table": orphans,
        "stuck_waiting": Run.objects.filter(status__in=["waiting", "waiting_for_user"]).count()
        + len(testing.stuck_waits()),
        "gather_runs_checked": len(gathered),
        "replay_mismatches": sum(r.get("replay_mismatches", 0) for r in gathered if r),
        "descendants_lost": len(testing.missing_descendants()),
        "children_open_mismatches": len(testing.children_open_mismatches()),
    }


def session_figures(double_actives_seen: int) -> dict[str, Any]:
    """A session's line after the drain (runqueue.testing, docs/decisions/sessions.md
    "Busy sessions: on_busy"): never two active runs in a session (sampled
    through the soak, and now), no pending turn left with no active run
    ahead of it (or left at all: every turn's session freed in the drain),
    no turn queued from its line twice."""
    from runqueue import testing
    from runqueue.models import RunStatus

    promoted = EventLog.objects.filter(type=events.PROMOTED)
    return {
        "sessions_with_two_active_runs": double_actives_seen + len(testing.double_actives()),
        "pending_turns_never_promoted": len(testing.unpromoted_sessions())
        + Run.objects.filter(status=RunStatus.PENDING).count(),
        "turns_promoted_twice": len(testing.double_promotions()),
        "turns_promoted": promoted.count(),
        "turns_merged": EventLog.objects.filter(type=events.MERGED).count(),
        "runs_interrupted": EventLog.objects.filter(
            type=events.CANCELLED, data__reason__in=["interrupted", "rolled_back"]
        ).count(),
        "turns_expired_in_line": EventLog.objects.filter(
            type=events.CANCELLED, data__reason="expired", run__place__isnull=False
        ).count(),
    }
