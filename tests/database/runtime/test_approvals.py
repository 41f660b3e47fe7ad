"""Tool calls that wait for a person's approval (``invoke_tool(approval=)``,
``runqueue.decide_tool``): the turn ends holding no slot, the decision is
applied once under racing deciders, and every later attempt replays it."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection

import runqueue
from runqueue import Idempotency, leases, testing
from runqueue.models import Run, ToolInvocation
from tests.helpers import Worker, claimed, event_types, expire_lease

pytestmark = pytest.mark.django_db

CALLS: list[tuple[str, dict]] = []
#: Set: the refund's worker dies once the refund has happened.
DIE = threading.Event()


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()
    DIE.clear()
    yield
    CALLS.clear()
    DIE.clear()


def _lookup(order: int) -> dict:
    CALLS.append(("lookup", {"order": order}))
    return {"order": order, "total": 40}


def _refund(order: int, amount: int, idempotency_key: str) -> dict:
    CALLS.append(("refund", {"order": order, "amount": amount}))
    if DIE.is_set():
        raise _Crash
    return {"refunded": amount}


@runqueue.handler("approvals.refund")
def _refund_turn(ctx: runqueue.RunContext):
    """Look the order up (no approval), then refund with a person's approval
    (every refund, or only large ones when the payload says so)."""
    order = ctx.invoke_tool(
        "lookup", _lookup, args={"order": 7}, idempotency=Idempotency.IDEMPOTENT
    ).value
    options = ctx.payload.get("approval", {})
    approval = (lambda args: args["amount"] > 100) if options.get("large_only") else True
    done = ctx.invoke_tool(
        "refund",
        _refund,
        args={"order": order["order"], "amount": ctx.payload.get("amount", 40)},
        approval=approval,
        approval_timeout=options.get("timeout"),
        on_timeout=options.get("on_timeout", "reject"),
    )
    return {"status": done.status, "value": done.value, "error": done.error}


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    """Stands in for a worker dying: the runtime records nothing after it."""


def _asked(amount: int = 40, **approval) -> Run:
    """A refund turn run until it waits for its approval."""
    run = runqueue.submit(
        kind="approvals.refund", payload={"amount": amount, "approval": approval}
    ).run
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"
    return Run.objects.get(id=run.id)


def test_a_call_awaiting_approval_ends_the_turn_and_runs_once_approved() -> None:
    run = _asked()
    assert (run.status, run.wait_reason, run.wait_name) == (
        "waiting",
        "signal",
        "runqueue.approval:1",
    )
    assert run.lease_owner in ("", None)  # no slot, no lease held
    record = ToolInvocation.objects.get(run_id=run.id, seq=1)
    assert (record.tool, record.status) == ("refund", "awaiting_approval")
    assert record.arguments == {"order": 7, "amount": 40}
    assert CALLS == [("lookup", {"order": 7})]  # the refund never ran

    decided = runqueue.decide_tool(run.id, 1, "approve", actor="user:ana")
    assert decided.status == "approved"
    assert decided.approval["decided"]["actor"] == "user:ana"
    assert Run.objects.get(id=run.id).status == "queued"

    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    done = Run.objects.get(id=run.id)
    assert done.result == {"status": "completed", "value": {"refunded": 40}, "error": None}
    # The lookup replayed from its record; the refund ran once.
    assert CALLS == [("lookup", {"order": 7}), ("refund", {"order": 7, "amount": 40})]
    types = event_types(run.id)
    assert types.count("tool.awaiting_approval") == 1
    assert types.count("tool.decided") == 1
    record.refresh_from_db()
    assert record.status == "completed"
    assert record.approval["decided"]["decision"] == "approve"  # the audit stays


def test_edit_runs_the_edited_arguments_and_keeps_the_asked_ones() -> None:
    run = _asked(amount=400)
    runqueue.decide_tool(run.id, 1, "edit", actor="user:ana", arguments={"order": 7, "amount": 40})
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert CALLS[-1] == ("refund", {"order": 7, "amount": 40})
    record = ToolInvocation.objects.get(run_id=run.id, seq=1)
    assert record.arguments == {"order": 7, "amount": 400}  # what the handler asked
    assert record.approval["decided"]["arguments"] == {"order": 7, "amount": 40}


def test_reject_gives_the_handler_the_reason_and_never_runs_the_tool() -> None:
    run = _asked()
    runqueue.decide_tool(run.id, 1, "reject", actor="user:ana", reason="the order shipped")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    result = Run.objects.get(id=run.id).result
    assert result["status"] == "rejected"
    assert result["error"]["type"] == "ToolRejected"
    assert "the order shipped" in result["error"]["message"]
    assert [name for name, _ in CALLS] == ["lookup"]


def test_respond_stands_for_the_call() -> None:
    run = _asked()
    runqueue.decide_tool(run.id, 1, "respond", actor="user:ana", result={"refunded": 0})
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    result = Run.objects.get(id=run.id).result
    assert result == {"status": "completed", "value": {"refunded": 0}, "error": None}
    assert [name for name, _ in CALLS] == ["lookup"]


def test_a_predicate_asks_only_for_the_calls_it_names() -> None:
    small = runqueue.submit(
        kind="approvals.refund", payload={"amount": 40, "approval": {"large_only": True}}
    ).run
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=small.id).result["status"] == "completed"
    large = _asked(amount=400, large_only=True)
    assert ToolInvocation.objects.get(run_id=large.id, seq=1).status == "awaiting_approval"


def test_a_decision_made_before_the_wait_begins_ends_it_at_once() -> None:
    """The decision lands between the call's record and the end of the
    turn (another connection, while the handler is still running): the
    mailbox keeps its signal and the wait ends as it begins."""
    run = runqueue.submit(kind="approvals.refund", payload={"amount": 40}).run
    lease = claimed(lease_seconds=30)
    ctx = runqueue.runtime.build_context(lease)
    with pytest.raises(runqueue.ApprovalPending) as raised:
        _refund_turn(ctx)
    assert runqueue.decide_tool(run.id, 1, "approve", actor="user:ana").status == "approved"
    wait = runqueue.runtime.running.stopped_by(raised.value)
    assert leases.write(lease, runqueue.runtime.running._returned(lease, ctx, wait))
    resumed = Run.objects.get(id=run.id)
    assert resumed.status == "queued"  # the wait found its signal and ended at once
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert [name for name, _ in CALLS].count("refund") == 1


@pytest.mark.django_db(transaction=True)
def test_racing_deciders_apply_exactly_one_decision() -> None:
    run = _asked()
    barrier = threading.Barrier(4)
    choices = [("approve", {}), ("reject", {"reason": "no"}), ("respond", {"result": 1})] * 2

    def decide(decision: str, extra: dict):
        def go():
            barrier.wait(10)
            return runqueue.decide_tool(run.id, 1, decision, actor=f"user:{decision}", **extra)

        return go

    deciders = [Worker(decide(d, e), name=d) for d, e in choices[:4]]
    for worker in deciders:
        worker.start()
    won, refused = [], []
    for worker in deciders:
        worker.join(30)
        (refused if isinstance(worker.error, runqueue.NotAwaitingApproval) else won).append(worker)
    assert all(w.error is None for w in won), [w.error for w in won]
    record = ToolInvocation.objects.get(run_id=run.id, seq=1)
    winner = record.approval["decided"]["decision"]
    # Only a decider who made the winning decision may be answered without
    # an error (the same decision again is a retry); every other is refused.
    assert {w.name for w in won} == {winner}
    assert len(refused) == 4 - len(won)
    assert event_types(run.id).count("tool.decided") == 1
    assert event_types(run.id).count("run.resumed") == 1


def test_the_same_decision_again_is_a_retry_another_is_refused() -> None:
    run = _asked()
    first = runqueue.decide_tool(run.id, 1, "reject", actor="api:t", reason="no")
    again = runqueue.decide_tool(run.id, 1, "reject", actor="api:t", reason="no")
    assert again.approval == first.approval
    with pytest.raises(runqueue.NotAwaitingApproval):
        runqueue.decide_tool(run.id, 1, "approve", actor="api:t")
    with pytest.raises(runqueue.NotAwaitingApproval):
        runqueue.decide_tool(run.id, 0, "approve", actor="api:t")  # needed no approval
    with pytest.raises(runqueue.ToolCallNotFound):
        runqueue.decide_tool(run.id, 9, "approve", actor="api:t")
    assert event_types(run.id).count("tool.decided") == 1


@pytest.mark.parametrize(
    ("seq", "decision", "extra", "name"),
    [
        (-1, "approve", {}, "seq"),
        (2**31, "approve", {}, "seq"),
        (True, "approve", {}, "seq"),
        (1, "maybe", {}, "decision"),
        (1, "edit", {}, "arguments"),
        (1, "edit", {"arguments": [1]}, "arguments"),
        (1, "approve", {"arguments": {"a": 1}}, "arguments"),
        (1, "approve", {"result": 1}, "result"),
        (1, "respond", {"result": float("nan")}, "result"),
        (1, "approve", {"actor": ""}, "actor"),
        (1, "reject", {"reason": "a\x00b"}, "reason"),
    ],
)
def test_bad_decisions_are_refused_and_nothing_is_written(seq, decision, extra, name) -> None:
    run = _asked()
    kwargs = {"actor": "user:ana", **extra}
    with pytest.raises(runqueue.InvalidArgument) as refused:
        runqueue.decide_tool(run.id, seq, decision, **kwargs)
    assert refused.value.name == name
    assert ToolInvocation.objects.get(run_id=run.id, seq=1).status == "awaiting_approval"
    assert Run.objects.get(id=run.id).status == "waiting"


def _time_out(run_id) -> None:
    """The call was asked more than its timeout ago, and its wait's deadline
    passes (the database's clock moved, test-only); the deadline service runs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_tool_invocation SET created_at = created_at - interval '1 hour'"
            " WHERE run_id = %s",
            [run_id],
        )
        cursor.execute(
            "UPDATE runqueue_run SET wait_until = now() - interval '1 second' WHERE id = %s",
            [run_id],
        )
    assert leases.resume_due() == 1


def test_a_timeout_rejects_the_call() -> None:
    run = _asked(timeout=60)
    assert Run.objects.get(id=run.id).wait_until is not None
    _time_out(run.id)
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    result = Run.objects.get(id=run.id).result
    assert result["status"] == "rejected"
    assert "no decision within 60 s" in result["error"]["message"]
    record = ToolInvocation.objects.get(run_id=run.id, seq=1)
    assert record.approval["decided"]["actor"] == "runqueue:timeout"
    with pytest.raises(runqueue.NotAwaitingApproval):
        runqueue.decide_tool(run.id, 1, "approve", actor="user:late")


def test_a_wait_that_ends_early_waits_again_for_what_is_left() -> None:
    """The wait's deadline passes (an operator's requeue, a clock) before the
    call's own deadline: the replay waits again, for what is left of it, and
    decides nothing."""
    run = _asked(timeout=600)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET wait_until = now() - interval '1 second' WHERE id = %s",
            [run.id],
        )
    assert leases.resume_due() == 1
    assert testing.execute(claimed(lease_seconds=30)) == "waiting"
    again = Run.objects.get(id=run.id)
    left = (again.wait_until - again.waiting_since).total_seconds()
    assert 0 < left <= 601  # the test shares one transaction: its clocks barely move
    assert ToolInvocation.objects.get(run_id=run.id, seq=1).status == "awaiting_approval"


def test_a_timeout_with_on_timeout_fail_dead_letters_the_run() -> None:
    run = _asked(timeout=60, on_timeout="fail")
    _time_out(run.id)
    assert testing.execute(claimed(lease_seconds=30)) == "failed"
    failure = Run.objects.get(id=run.id).failure
    assert "was not decided within 60 s" in failure["message"]
    assert [name for name, _ in CALLS] == ["lookup"]


def test_an_approved_call_cut_short_by_a_lost_worker_is_uncertain() -> None:
    run = _asked()
    runqueue.decide_tool(run.id, 1, "approve", actor="user:ana")
    lease = claimed(lease_seconds=30)
    DIE.set()  # the worker dies once the refund happened, before its outcome
    with pytest.raises(_Crash):
        _refund_turn(runqueue.runtime.build_context(lease))
    DIE.clear()
    assert ToolInvocation.objects.get(run_id=run.id, seq=1).status == "started"
    expire_lease(run.id)
    leases.sweep()
    Run.objects.filter(id=run.id).update(scheduled_for=None)
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    result = Run.objects.get(id=run.id).result
    assert result["status"] == "uncertain"  # approved, may have run: never run twice
    assert [name for name, _ in CALLS].count("refund") == 1


def test_an_unknown_approval_option_is_refused_before_the_call_is_numbered() -> None:
    runqueue.submit(kind="test.echo", payload={})
    ctx = runqueue.runtime.build_context(claimed(lease_seconds=30))
    with pytest.raises(TypeError):
        ctx.invoke_tool("t", _lookup, args={"order": 1}, approval="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_timeout"):
        ctx.invoke_tool("t", _lookup, args={"order": 1}, approval=True, on_timeout="approve")
    with pytest.raises(ValueError, match="approval_timeout"):
        ctx.invoke_tool("t", _lookup, args={"order": 1}, approval_timeout=5)
    assert ctx._seq == 0
    assert not ToolInvocation.objects.filter(run_id=ctx.run.id).exists()


@runqueue.handler("approvals.gathered")
async def _gathered(ctx):
    """Two calls that need approval, gathered: the turn waits for each in order."""
    first, second = await asyncio.gather(
        ctx.invoke_tool("a", _lookup, args={"order": 1}, approval=True),
        ctx.invoke_tool("b", _lookup, args={"order": 2}, approval=True),
    )
    return [first.status, second.status]


@pytest.mark.django_db(transaction=True)
def test_an_async_handler_waits_for_each_approval_of_a_gather() -> None:
    """Both calls need a decision: whichever raised first ends the turn (the
    other may or may not have recorded itself before the turn's end closed
    the lease); each is decided as it is found waiting, and the run ends
    with both decisions applied, each call run at most as decided."""
    run = runqueue.submit(kind="approvals.gathered", payload={}).run
    decisions = {0: ("approve", {}), 1: ("reject", {"reason": "not that one"})}
    decided: set[int] = set()
    for _ in range(4):
        outcome = testing.execute(claimed(lease_seconds=30))
        if outcome == "succeeded":
            break
        assert outcome == "waiting"
        assert Run.objects.get(id=run.id).wait_name.startswith("runqueue.approval:")
        for record in ToolInvocation.objects.filter(run_id=run.id, status="awaiting_approval"):
            decision, extra = decisions[record.seq]
            runqueue.decide_tool(run.id, record.seq, decision, actor="user:ana", **extra)
            decided.add(record.seq)
    assert decided == {0, 1}
    assert Run.objects.get(id=run.id).result == ["completed", "rejected"]
    assert CALLS == [("lookup", {"order": 1})]
    assert not runqueue.models.Signal.objects.filter(run_id=run.id).exists()
