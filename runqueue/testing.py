"""Paths only tests (and a project's own tests) take: a worker never does.

A worker decides an attempt's outcome in a slot and its group writes it,
succeeded and failed ones with its next claim (``finish_and_claim``).
These write one lease's outcome alone, through the same fenced statements,
so a test can drive a run step by step without a worker.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import TYPE_CHECKING

from django.apps import apps
from django.db.models import Count, Exists, F, OuterRef, Q, Sum

from runqueue import events, leases, runtime
from runqueue.leases import SPAWN_TOOL
from runqueue.leases.failures import Failure
from runqueue.leases.outcomes import Failed, Succeeded
from runqueue.models import (
    ACTIVE_STATUSES,
    EventLog,
    Run,
    RunEvent,
    RunStatus,
    ToolInvocation,
    ToolStatus,
    TreeSpend,
    Usage,
    WaitReason,
)
from runqueue.types import JSON

if TYPE_CHECKING:
    from runqueue.worker.group import Group

#: A tree's spending: calls, unpriced calls, input tokens, output tokens, cost.
Spent = tuple[int, int, int, int, Decimal]


def execute(lease: leases.Lease) -> str:
    """Run the handler for a claimed lease and write its outcome, alone.

    Returns what the run became: succeeded, failed, requeued, waiting or
    fenced.
    """
    outcome = runtime.decide(lease)
    return leases.label(lease, outcome, leases.write(lease, outcome))


def succeed(lease: leases.Lease, result: JSON = None) -> bool:
    """Finish the run as succeeded with ``result``; False once fenced.
    ValueError (nothing written) if ``result`` cannot be stored."""
    return leases.write(lease, Succeeded.of(result))


def fail(lease: leases.Lease, failure: Failure) -> bool:
    """Dead-letter the run now (a permanent failure); False once fenced."""
    return leases.write(lease, Failed(failure))


def ready(group: Group) -> list[leases.Lease]:
    """Leases ``group`` claimed ahead that no slot has started yet."""
    with group.state.cond:
        return list(group.state.ready)


# --- the run tree's invariants (docs/decisions/run-trees.md, "Rules a run-tree feature keeps")
# The model-checked state machine (tests/database/subagents/test_run_tree_model.py) checks them
# after every step and the chaos soak after its drain; a project's own tests
# may check them too. Each returns what breaks the rule (empty: it holds).


def children_open_mismatches() -> list[tuple[uuid.UUID, int, int]]:
    """Live runs whose ``children_open`` is not their live children's
    count: (run, children_open, live children)."""
    live = Q(children__status__in=ACTIVE_STATUSES)
    runs = (
        Run.objects.filter(status__in=ACTIVE_STATUSES)
        .annotate(open_children=Count("children", filter=live))
        .exclude(children_open=F("open_children"))
    )
    return list(runs.values_list("id", "children_open", "open_children"))


def stuck_waits() -> list[tuple[uuid.UUID, str]]:
    """Waiting runs nothing can wake: a wait for children with none open,
    a timer with no time, a signal or an event with no name (or an event
    without a match). (run, wait_reason)."""
    waiting = Run.objects.filter(status=RunStatus.WAITING)
    stuck = (
        waiting.filter(wait_reason=WaitReason.CHILDREN, children_open__lte=0)
        | waiting.filter(wait_reason=WaitReason.TIMER, wait_until__isnull=True)
        | waiting.filter(wait_reason=WaitReason.SIGNAL, wait_name="")
        | waiting.filter(wait_reason=WaitReason.EVENT, wait_name="")
        | waiting.filter(wait_reason=WaitReason.EVENT, wait_match__isnull=True)
        | waiting.exclude(
            wait_reason__in=[
                WaitReason.CHILDREN,
                WaitReason.TIMER,
                WaitReason.SIGNAL,
                WaitReason.EVENT,
            ]
        )
    )
    return list(stuck.values_list("id", "wait_reason"))


def undelivered_decisions() -> list[tuple[uuid.UUID, int]]:
    """Runs still waiting for a tool call's decision that was made: the
    decision must have woken them. (run, seq)."""
    waiting = Run.objects.filter(
        status=RunStatus.WAITING,
        wait_reason=WaitReason.SIGNAL,
        wait_name__startswith="runqueue.approval:",
    ).values_list("id", "wait_name")
    stuck = []
    for run_id, name in waiting:
        seq = int(name.rpartition(":")[2])
        status = (
            ToolInvocation.objects.filter(run_id=run_id, seq=seq)
            .values_list("status", flat=True)
            .first()
        )
        if status != ToolStatus.AWAITING_APPROVAL:
            stuck.append((run_id, seq))
    return stuck


def double_resumes() -> list[uuid.UUID]:
    """Runs resumed from a wait for children more often than they waited."""
    counts = (
        RunEvent.objects.filter(
            type__in=[events.SUSPENDED, events.RESUMED], data__reason=WaitReason.CHILDREN
        )
        .values("run_id")
        .annotate(
            waits=Count("id", filter=Q(type=events.SUSPENDED)),
            resumes=Count("id", filter=Q(type=events.RESUMED)),
        )
        .filter(resumes__gt=F("waits"))
    )
    return [row["run_id"] for row in counts]


def orphan_rows() -> dict[str, int]:
    """Rows keyed by a run that is gone, per table (tables with none left
    out): every table keyed by a run goes with the run."""
    found: dict[str, int] = {}
    runs = Run.objects.values("id")
    for model in apps.get_app_config("runqueue").get_models():
        if model._meta.proxy or model is Run:
            continue
        for f in model._meta.concrete_fields:
            if getattr(f, "related_model", None) is Run:
                lost = (
                    model._base_manager.exclude(**{f"{f.name}__isnull": True})
                    .exclude(**{f"{f.attname}__in": runs})
                    .count()
                )
                if lost:
                    found[model._meta.db_table] = found.get(model._meta.db_table, 0) + lost
    return found


def tree_totals_mismatches() -> list[tuple[uuid.UUID, Spent | None, Spent | None]]:
    """Trees whose totals row is not the sums of the usage records naming
    its root: (root, the records' sums, the totals row), each (calls,
    unpriced calls, input tokens, output tokens, cost) or None for none. A
    totals row with no call (a spend cap, nothing spent yet) counts as none."""
    records: dict[uuid.UUID, Spent] = {
        row[0]: (row[1], row[2], row[3], row[4], row[5] or Decimal(0))
        for row in Usage.objects.order_by()
        .values("root_id")
        .annotate(
            n=Count("id"),
            u=Count("id", filter=Q(cost__isnull=True)),
            i=Sum("input_tokens"),
            o=Sum("output_tokens"),
            c=Sum("cost"),
        )
        .values_list("root_id", "n", "u", "i", "o", "c")
    }
    totals: dict[uuid.UUID, Spent] = {
        row[0]: row[1:]
        for row in TreeSpend.objects.filter(calls__gt=0).values_list(
            "run_id", "calls", "unpriced_calls", "input_tokens", "output_tokens", "cost"
        )
    }
    return [
        (root, records.get(root), totals.get(root))
        for root in sorted(records.keys() | totals.keys())
        if records.get(root) != totals.get(root)
    ]


def missing_descendants() -> list[uuid.UUID]:
    """Children, at any depth below a live run, that are gone: a live run
    (and so its handler, when it resumes) still reads every one."""
    missing: list[uuid.UUID] = []
    level = set(Run.objects.filter(status__in=ACTIVE_STATUSES).values_list("id", flat=True))
    seen = set(level)
    while level:
        records = ToolInvocation.objects.filter(
            run_id__in=level, tool=SPAWN_TOOL, status=ToolStatus.COMPLETED
        ).values_list("result", flat=True)
        spawned = {uuid.UUID(str(r["run_id"])) for r in records if isinstance(r, dict)} - seen
        found = set(Run.objects.filter(id__in=spawned).values_list("id", flat=True))
        missing.extend(sorted(spawned - found))
        seen |= spawned
        level = found
    return missing


# --- a session's line (docs/decisions/sessions.md, "Busy sessions: on_busy") ---------


def double_actives() -> list[tuple[str, str | None, int]]:
    """Sessions with more than one active run: (tenant, session, how many)."""
    rows = (
        Run.objects.filter(status__in=ACTIVE_STATUSES, session_id__isnull=False)
        .values("tenant", "session_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by()
    )
    return [(r["tenant"], r["session_id"], r["n"]) for r in rows]


def unpromoted_sessions() -> list[tuple[str, str | None]]:
    """Sessions with pending turns but no active run: a line nothing will
    move on (the statement that ended the active run queues the next)."""
    active = Run.objects.filter(
        tenant=OuterRef("tenant"), session_id=OuterRef("session_id"), status__in=ACTIVE_STATUSES
    )
    rows = (
        Run.objects.filter(status=RunStatus.PENDING)
        .filter(~Exists(active))
        .values_list("tenant", "session_id")
        .distinct()
        .order_by()
    )
    return list(rows)


def double_promotions() -> list[uuid.UUID]:
    """Runs queued from their session's line more than once."""
    rows = (
        RunEvent.objects.filter(type=events.PROMOTED)
        .values("run_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    return [row["run_id"] for row in rows]


def log_mismatches() -> list[tuple[uuid.UUID, str, str | None]]:
    """Runs whose log (``EventLog``: event rows and the events their rows
    hold) does not end where the run is: (run, its status, the status its
    last status event names), for each run whose last event that moves a
    status (``events.STATUS_OF``; a pending turn's ``run.created`` names
    pending, ``run.promoted`` queued) names another status, or whose log
    shows an id twice."""
    moves = {**events.STATUS_OF, events.PROMOTED: RunStatus.QUEUED.value}
    last: dict[uuid.UUID, str] = {}
    seen: dict[uuid.UUID, set[int]] = {}
    twice: set[uuid.UUID] = set()
    rows = EventLog.objects.order_by("id").values_list("run_id", "id", "type", "data")
    for run_id, event_id, type_, data in rows.iterator(chunk_size=5000):
        ids = seen.setdefault(run_id, set())
        if event_id in ids:
            twice.add(run_id)
        ids.add(event_id)
        if type_ == events.CREATED and isinstance(data, dict) and data.get("pending"):
            last[run_id] = RunStatus.PENDING.value
        elif type_ in moves:
            last[run_id] = moves[type_]
    found = []
    for run_id, status in Run.objects.values_list("id", "status"):
        if run_id in twice or last.get(run_id) != status:
            found.append((run_id, status, last.get(run_id)))
    return found
