"""The agent adapters on real ``runworker`` processes, for each SDK
(tests/agents/killed_agents.py: model -> lookup_order -> model -> refund ->
final answer):

- the worker running the agent is killed (SIGKILL) at each step boundary
  in turn and another worker finishes the run: every model request whose
  step was recorded was sent once in all, the idempotent lookup ran again
  only if it was cut short, the refund ran at most once and, cut short, is
  ``uncertain`` and the model was told so; otherwise the answer is the
  uninterrupted run's;
- two people race to decide the refund's approval: one decision applies,
  and the worker finishes the run as it says;
- a rolling deploy changes the agent's tool list (version 2 of the kind):
  the run awaiting approval stays on version 1 (the call is inside a turn)
  and finishes there with the same answer; a new run runs on version 2.

Every wait is on something a worker wrote (a ledger row, a step record, a
run's status, a backend blocked on the test's lock), polled to a deadline.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from django.db import connection  # noqa: E402

import runqueue  # noqa: E402
from runqueue.errors import NotAwaitingApproval  # noqa: E402
from runqueue.models import TERMINAL_STATUSES, Run, ToolInvocation, Usage  # noqa: E402
from runqueue.models import Worker as WorkerRow  # noqa: E402
from runqueue.reads import versions  # noqa: E402
from tests.agents import killed_openai_agents, killed_pydantic_ai  # noqa: E402, F401 - kinds
from tests.agents.killed_agents import ANSWER, DEPLOYS, KINDS, MODEL, SDKS, TAG  # noqa: E402
from tests.handlers import ledger  # noqa: E402
from tests.helpers import Worker, expire_lease, is_blocked, wait_until  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
ARGS = ["--lease-seconds", "2", "--heartbeat-seconds", "0.5"]
ARGS += ["--sweep-seconds", "0.5", "--poll-seconds", "0.5"]

MODEL_STEP = f"model:{MODEL}"
V1_TOOLS = "lookup_order,refund"  # the tools version 1 of the deploy kinds offers
V2_TOOLS = "lookup_order,notify_customer,refund"
REJECTED = "The call was rejected: over the limit"


def start(start_worker: Any, worker_id: str, sdk: str, deploy: str = "this") -> Any:
    """A real ``manage.py runworker`` with the SDK's agents of this deploy
    or the next (``DEPLOYS``)."""
    env = {"RUNQUEUE_TEST_HANDLER_MODULES": json.dumps(DEPLOYS[deploy][sdk])}
    return start_worker(*ARGS, "--worker-id", worker_id, settings=FAST, env=env)


def rows(what: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE run_id = %s AND what = %s ORDER BY id",
            [TAG, what],
        )
        return [row[0] for row in cursor.fetchall()]


def steps(run_id: Any) -> list[tuple[str, str]]:
    records = ToolInvocation.objects.filter(run_id=run_id).order_by("seq")
    return [(t.tool, t.status) for t in records]


def finished(run_id: Any) -> Run:
    wait_until(
        lambda: Run.objects.filter(id=run_id, status__in=TERMINAL_STATUSES).exists(),
        what="the run to finish",
    )
    run = Run.objects.get(id=run_id)
    assert run.status == "succeeded", (run.status, run.failure)
    return run


def awaiting_refund(run_id: Any) -> Run:
    """Wait for the run to wait for the refund's approval (call 3)."""
    wait_until(
        lambda: (
            Run.objects.filter(id=run_id, status="waiting").exists()
            and steps(run_id)[-1:] == [("refund", "awaiting_approval")]
        ),
        what="the refund to await approval",
    )
    assert steps(run_id) == [
        (MODEL_STEP, "completed"),
        ("lookup_order", "completed"),
        (MODEL_STEP, "completed"),
        ("refund", "awaiting_approval"),
    ]
    assert rows("tool") == ["lookup_order"]  # the refund has not run
    return Run.objects.get(id=run_id)


def kill_9(worker: Any) -> None:
    worker.send(signal.SIGKILL)
    assert worker.wait() == -signal.SIGKILL


# --- kill -9 at each step boundary --------------------------------------------

M, L, R = MODEL_STEP, "lookup_order", "refund"
#: Where the worker is killed, and the run's record at that moment. A name is
#: a point the worker parks at (tests/agents/killed_agents.py); "recorded" is
#: after the first request's step was recorded, before the lookup's: the
#: worker is blocked recording the lookup's start behind the test's lock.
BOUNDARIES: dict[str, list[tuple[str, str]]] = {
    "model-0": [(M, "started")],  # the first model request in flight
    "recorded": [(M, "completed")],
    "lookup_order": [(M, "completed"), (L, "started")],  # the lookup running
    "refund": [(M, "completed"), (L, "completed"), (M, "completed"), (R, "started")],
    "model-2": [(M, "completed"), (L, "completed"), (M, "completed"), (R, "completed")]
    + [(M, "started")],  # the final request in flight
}


def _hold_lookup_start(hold: Any, run_id: Any) -> int:
    """Insert the lookup's record (call 1) in a transaction left open: the
    worker's own insert of it waits on the unique index until the test
    rolls back, after the first request's step was recorded. The server
    backend holding it (the pooled mode's too: a transaction keeps one)."""
    hold.execute(
        "INSERT INTO runqueue_tool_invocation (run_id, seq, tool, idempotency, status,"
        " arguments, lease_epoch, created_at) VALUES (%s, 1, 'hold', 'idempotent', 'started',"
        " '{}', 0, now())",
        [run_id],
    )
    return hold.execute("SELECT pg_backend_pid()").fetchone()[0]


def _blocked_by(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid)))",
            [pid],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("boundary", [None, *BOUNDARIES])
@pytest.mark.parametrize("sdk", SDKS)
def test_kill_9_at_a_step_boundary(start_worker, raw_connect, sdk: str, boundary: str) -> None:
    # The run and the test's hold exist before any worker can take it.
    run_id = runqueue.submit(kind=KINDS["killed"][sdk]).run.id
    hold = raw_connect(autocommit=False) if boundary == "recorded" else None
    if hold is not None:
        holder = _hold_lookup_start(hold, run_id)
    elif boundary is not None:
        ledger(TAG, "park", boundary)
    # Two workers: the one that claims the run is killed, the other finishes it.
    workers = {w: start(start_worker, w, sdk) for w in (["A", "B"] if boundary else ["A"])}

    record: list[tuple[str, str]] = []
    if boundary is not None:
        if hold is not None:
            wait_until(lambda: _blocked_by(holder), what="the lookup's record")
        else:
            wait_until(lambda: rows("parked") == [boundary], what=f"a worker at {boundary}")
        record = steps(run_id)
        assert record == BOUNDARIES[boundary]
        owner = Run.objects.get(id=run_id).lease_owner.partition("/")[0]
        kill_9(workers.pop(owner))
        if hold is not None:
            hold.rollback()  # the dead worker's insert goes on, and is never committed
        expire_lease(run_id)

    run = finished(run_id)
    (survivor,) = workers
    assert run.lease_owner.startswith(f"{survivor}/")
    assert run.attempts == (2 if boundary else 1)
    cut_short = [(tool, seq) for seq, (tool, status) in enumerate(record) if status == "started"]
    # Each model request was sent once, but the one in flight when the worker died.
    assert rows("model") == sorted(
        ["0", "1", "2"] + [str(seq // 2) for tool, seq in cut_short if tool == M]
    )
    # Each response was paid for once, by the attempt it reached: a replay pays nothing.
    assert Usage.objects.filter(run_id=run_id, model=MODEL).count() == 3
    # The lookup (idempotent) ran again only when cut short; the refund once.
    assert rows("tool") == ["lookup_order"] * (1 + ((L, 1) in cut_short)) + ["refund"]
    refund_cut = (R, 3) in cut_short
    assert steps(run_id) == [
        (M, "completed"),
        (L, "completed"),
        (M, "completed"),
        (R, "uncertain" if refund_cut else "completed"),
        (M, "completed"),
    ]
    # The refund's return, as the final request carried it (each time it was sent).
    saw = rows("saw")[0]
    assert rows("saw") == [saw] * rows("model").count("2")
    if refund_cut:
        # Not run again, and the model was told its outcome is unknown.
        assert saw.startswith("The outcome of this refund call is unknown"), saw
        assert run.result == f"done: {saw}"
    else:
        assert saw == "refunded 7"
        assert run.result == ANSWER  # the uninterrupted run's answer


# --- approvals raced by two deciders ------------------------------------------


@pytest.mark.parametrize("sdk", SDKS)
def test_two_deciders_race_and_one_decision_applies(start_worker, raw_connect, sdk: str) -> None:
    run_id = runqueue.submit(kind=KINDS["approve"][sdk]).run.id
    start(start_worker, "A", sdk)
    awaiting_refund(run_id)

    # Both deciders start behind a barrier, and both are in flight at once:
    # each waits for the run's row lock, which the test holds until then.
    hold = raw_connect(autocommit=False)
    hold.execute("SELECT FROM runqueue_run WHERE id = %s FOR UPDATE", [run_id])
    barrier = threading.Barrier(2)

    def decide(decision: str, **more: Any) -> Any:
        barrier.wait(timeout=30)
        return runqueue.decide_tool(run_id, 3, decision, **more)

    deciders = [
        Worker(lambda: decide("approve", actor="user:ana"), name="approve"),
        Worker(lambda: decide("reject", actor="user:bob", reason="over the limit"), name="reject"),
    ]
    for decider in deciders:
        decider.start()
    wait_until(
        lambda: all(d.started_fn.is_set() and is_blocked(d.backend_pid) for d in deciders),
        what="both deciders to wait for the run's lock",
    )
    hold.rollback()
    applied, refused = [], []
    for decider in deciders:
        try:
            decider.outcome()
        except NotAwaitingApproval:
            refused.append(decider.name)
        else:
            applied.append(decider.name)
    assert len(applied) == 1 and len(refused) == 1, (applied, refused)
    (winner,) = applied
    decided = ToolInvocation.objects.get(run_id=run_id, seq=3).approval["decided"]
    assert decided["decision"] == winner

    run = finished(run_id)
    # The two first requests were sent once: replayed after the decision.
    assert rows("model") == ["0", "1", "2"]
    (saw,) = rows("saw")
    if winner == "approve":
        assert rows("tool") == ["lookup_order", "refund"]  # the refund ran once
        assert steps(run_id)[3] == ("refund", "completed")
        assert (saw, run.result) == ("refunded 7", ANSWER)
    else:
        assert rows("tool") == ["lookup_order"]  # the refund never ran
        assert steps(run_id)[3] == ("refund", "rejected")
        assert (saw, run.result) == (REJECTED, f"done: {REJECTED}")  # the model read why


# --- a rolling deploy that changes the agent's tool list ------------------------


def _pinned(kind: str) -> dict[int | None, int]:
    """The dashboard's active runs of ``kind`` by version (Kinds and versions)."""
    return {row.version: row.active for row in versions.table() if row.kind == kind}


@pytest.mark.parametrize("sdk", SDKS)
def test_a_deploy_that_changes_the_tools_leaves_a_waiting_run_on_its_version(
    start_worker, sdk: str
) -> None:
    kind = KINDS["deploy"][sdk]
    waiting = runqueue.submit(kind=kind).run.id
    old = start(start_worker, "old", sdk)
    wait_until(
        lambda: Run.objects.filter(id=waiting, handler_version=1).exists(),
        what="the old worker's claim to pin the run to version 1",
    )
    # The next deploy (versions 1 and 2, 2 migrating from 1 between turns)
    # starts, and replaces the old one once the run waits for its approval.
    start(start_worker, "new", sdk, "next")
    assert awaiting_refund(waiting).handler_version == 1
    old.send(signal.SIGTERM)
    assert old.wait() == 0, old.output()
    wait_until(lambda: WorkerRow.objects.filter(id="new").exists(), what="the new worker")
    assert WorkerRow.objects.get(id="new").kinds[kind] == {"versions": [1, 2], "moves": {"1": 2}}
    # The dashboard counts the waiting run on version 1: not yet the time to remove it.
    assert _pinned(kind) == {1: 1, 2: 0}

    # A call awaiting approval is inside a turn: the run stays on version 1,
    # replays its steps there and finishes with the same answer.
    runqueue.decide_tool(waiting, 3, "approve", actor="user:ana")
    run = finished(waiting)
    assert run.lease_owner.startswith("new/")
    assert (run.handler_version, run.result) == (1, ANSWER)
    assert rows("model") == ["0", "1", "2"]
    assert rows("offered") == [V1_TOOLS] * 3  # version 1's tools, on the new worker too
    assert rows("tool") == ["lookup_order", "refund"]
    assert _pinned(kind) == {1: 0, 2: 0}

    # A new run of the kind runs on version 2, with its tools.
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE runqueue_test_ledger")
    fresh = runqueue.submit(kind=kind).run.id
    assert awaiting_refund(fresh).handler_version == 2
    runqueue.decide_tool(fresh, 3, "approve", actor="user:ana")
    run = finished(fresh)
    assert (run.handler_version, run.result) == (2, ANSWER)
    assert rows("offered") == [V2_TOOLS] * 3
    assert rows("tool") == ["lookup_order", "refund"]
