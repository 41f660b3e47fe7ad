"""Cancellation reaches the handler, and async handlers run on the loop.

A real pool in this process (its LISTEN thread, group threads and slots)
against the real database; the cancel comes from another connection, as an
operator's would. The heartbeat is set far beyond every wait here, so only
the cancel's NOTIFY can tell the worker in time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from django.db import connection

import runqueue
from runqueue import Idempotency, leases
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation, Worker
from runqueue.runtime import AsyncRunContext, RunContext
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.helpers import CLAIM_CLEARED, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: What the handlers saw, by run id; events the tests wait on.
seen: dict[str, list[Any]] = defaultdict(list)
started: dict[str, threading.Event] = defaultdict(threading.Event)
let_go = threading.Event()


def _mark(ctx: RunContext | AsyncRunContext, what: Any) -> None:
    seen[str(ctx.run.id)].append(what)


@runqueue.handler("test.cancel.sync_wait")
def sync_wait(ctx: RunContext) -> dict:
    """Waits on ctx.cancelled (as an HTTP client handed the event would)."""
    try:
        started[str(ctx.run.id)].set()
        if not ctx.cancelled.wait(30):
            return {"cancelled": False}
        _mark(ctx, ("cancelled", ctx.lease.cancel_reason))
        try:
            ctx.checkpoint({"after": "cancel"})
        except runqueue.RunCancelled as exc:
            _mark(ctx, ("raised", exc.reason))
        ctx.emit("progress", {"late": True})  # raises RunCancelled: the handler ends here
        return {"unreachable": True}
    finally:
        _mark(ctx, "finally")


@runqueue.handler("test.cancel.sync_ignores")
def sync_ignores(ctx: RunContext) -> None:
    """Ignores cancellation until the test lets it go."""
    started[str(ctx.run.id)].set()
    let_go.wait(30)


@runqueue.handler("test.cancel.async_sleep")
async def async_sleep(ctx: AsyncRunContext) -> dict:
    """Awaits a long fake model call."""
    await ctx.checkpoint({"step": "calling"})
    started[str(ctx.run.id)].set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        _mark(ctx, ("CancelledError", ctx.lease.cancel_reason))
        raise
    finally:
        _mark(ctx, "finally")
    return {"slept": True}


@runqueue.handler("test.cancel.async_tool")
async def async_tool(ctx: AsyncRunContext) -> dict:
    """Calls an async tool of the payload's class that hangs until cancelled."""

    async def effect(idempotency_key: str) -> dict:
        started[str(ctx.run.id)].set()
        await asyncio.sleep(30)
        return {"done": True}

    outcome = await ctx.invoke_tool(
        "effect", effect, idempotency=ctx.payload.get("idempotency", "non_idempotent")
    )
    return {"tool": outcome.status}


@runqueue.handler("test.cancel.async_ok")
async def async_ok(ctx: AsyncRunContext) -> dict:
    """Awaits writes and an async tool; ends normally."""

    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    await ctx.emit("progress", {"step": 1})
    tool = await ctx.invoke_tool(
        "double", double, args={"n": ctx.payload["n"]}, idempotency=Idempotency.IDEMPOTENT
    )
    await ctx.checkpoint({"doubled": tool.value})
    assert await ctx.heartbeat()
    return {"value": tool.value, "threads": threading.current_thread().name}


def _pool(*slots: str) -> Pool:
    config = PoolConfig(
        slots=tuple(SlotSpec.parse(s) for s in slots),
        worker_id=f"cancel-test-{time.monotonic_ns()}",
        lease_seconds=300,
        heartbeat_seconds=200,  # never within a test: only the NOTIFY tells the worker
        grace_seconds=10,
        poll_seconds=30,
    )
    pool = Pool(config)
    pool.start()
    assert pool.listener.wait_listening(30)
    return pool


@pytest.fixture
def pool_of():
    pools: list[Pool] = []

    def make(*slots: str) -> Pool:
        pools.append(_pool(*slots))
        return pools[-1]

    yield make
    let_go.set()
    for pool in pools:
        pool.shutdown()
        pool.listener.join(10)
    let_go.clear()
    connection.close()


def _submit(kind: str, **payload: Any) -> str:
    return str(runqueue.submit(kind=kind, payload=payload).run.id)


def _wait_started(run_id: str) -> None:
    assert started[run_id].wait(30), f"run {run_id} never started"


def _cancel(run_id: str) -> None:
    runqueue.cancel(run_id, reason="stop button", actor="user")


@pytest.mark.parametrize("slot", ["interactive=1", "interactive=1:loop"])
def test_a_sync_handler_waiting_on_ctx_cancelled_is_told_and_its_slot_is_free(
    pool_of, slot
) -> None:
    pool = pool_of(slot)
    run_id = _submit("test.cancel.sync_wait")
    _wait_started(run_id)
    _cancel(run_id)
    wait_until(lambda: "finally" in seen[run_id], what="the handler to end")
    assert seen[run_id] == [("cancelled", "cancelled"), ("raised", "cancelled"), "finally"]
    # The slot is claimable again: the one slot runs the next run.
    nxt = _submit("test.cancel.async_ok", n=2)
    wait_until(lambda: Run.objects.get(id=nxt).status == RunStatus.SUCCEEDED, what="next run")
    run = Run.objects.get(id=run_id)
    assert run.status == RunStatus.CANCELLED
    assert not EventLog.objects.filter(run_id=run_id, type="run.checkpoint").exists()
    assert pool.ignoring_cancellation() == []


@pytest.mark.parametrize("slot", ["interactive=1", "interactive=1:loop"])
def test_an_async_handler_gets_cancelled_error_at_its_await_and_its_finally_runs(
    pool_of, slot
) -> None:
    pool_of(slot)
    run_id = _submit("test.cancel.async_sleep")
    _wait_started(run_id)
    _cancel(run_id)
    wait_until(lambda: "finally" in seen[run_id], what="the handler's finally")
    assert seen[run_id] == [("CancelledError", "cancelled"), "finally"]
    nxt = _submit("test.cancel.async_ok", n=3)
    wait_until(lambda: Run.objects.get(id=nxt).status == RunStatus.SUCCEEDED, what="next run")
    assert Run.objects.get(id=nxt).result["value"] == 6
    assert Run.objects.get(id=run_id).status == RunStatus.CANCELLED


def test_a_non_idempotent_tool_interrupted_by_cancel_is_uncertain(pool_of) -> None:
    pool_of("interactive=2:loop")
    non_idem = _submit("test.cancel.async_tool", idempotency="non_idempotent")
    idem = _submit("test.cancel.async_tool", idempotency="idempotent")
    _wait_started(non_idem)
    _wait_started(idem)
    _cancel(non_idem)
    _cancel(idem)
    wait_until(
        lambda: (
            not Run.objects.filter(id__in=[non_idem, idem], lease_owner__gt="").exists()
            and all(Run.objects.get(id=r).status == RunStatus.CANCELLED for r in (non_idem, idem))
        ),
        what="both cancelled",
    )
    uncertain = ToolInvocation.objects.get(run_id=non_idem, seq=0)
    assert uncertain.status == "uncertain"
    assert uncertain.error["type"] == "RunCancelled"
    assert EventLog.objects.filter(run_id=non_idem, type="tool.uncertain").count() == 1
    # An idempotent call needs no answer: nothing will run it again.
    assert ToolInvocation.objects.get(run_id=idem, seq=0).status == "started"


def test_async_handlers_write_through_the_fence_like_sync_ones(pool_of) -> None:
    pool_of("interactive=4:loop")
    ids = [_submit("test.cancel.async_ok", n=i) for i in range(8)]
    wait_until(
        lambda: Run.objects.filter(id__in=ids, status=RunStatus.SUCCEEDED).count() == 8,
        what="eight async runs",
    )
    for i, run_id in enumerate(ids):
        run = Run.objects.get(id=run_id)
        assert run.result["value"] == 2 * i
        # The handler ran on the loop, not in a thread of its own.
        assert run.result["threads"] == "runqueue-loop"
        types = list(EventLog.objects.filter(run_id=run_id).values_list("type", flat=True))
        assert types.count("tool.completed") == 1 and "run.succeeded" in types
        tool = ToolInvocation.objects.get(run_id=run_id, seq=0)
        assert (tool.status, tool.result) == ("completed", 2 * i)


def test_an_async_handler_whose_lease_is_lost_is_cancelled_and_writes_nothing(pool_of) -> None:
    """Fenced, not cancelled: the sweeper took the run back (another worker's
    epoch). The heartbeat that finds out cancels the handler's task."""
    pool = pool_of("interactive=1:loop")
    run_id = _submit("test.cancel.async_sleep")
    _wait_started(run_id)
    (lease,) = pool.held()
    with connection.cursor() as cursor:  # what the sweeper does to an expired lease
        cursor.execute(
            "UPDATE runqueue_run SET status = 'queued', lease_epoch = lease_epoch + 1, "
            "lease_owner = '', lease_expires_at = NULL, scheduled_for = now() + interval '1h', "
            + CLAIM_CLEARED
            + " WHERE id = %s",
            [run_id],
        )
    assert leases.heartbeat_many(pool.held()) == [lease]
    wait_until(lambda: "finally" in seen[run_id], what="the handler's finally")
    assert seen[run_id] == [("CancelledError", "fenced"), "finally"]
    wait_until(lambda: pool.held() == [], what="the lease to end")
    assert Run.objects.get(id=run_id).status == RunStatus.QUEUED


def test_a_handler_ignoring_its_cancel_is_reported_with_its_slot(pool_of, caplog) -> None:
    pool = pool_of("interactive=1")
    run_id = _submit("test.cancel.sync_ignores")
    _wait_started(run_id)
    caplog.set_level(logging.WARNING, logger="runqueue.worker")
    _cancel(run_id)
    wait_until(lambda: pool.ignoring_cancellation() != [], what="the cancel to arrive")
    pool.report_seen()  # the worker-row service's tick
    (slot,) = Worker.objects.get(id=pool.config.worker_id).cancelled_slots
    assert (slot["run_id"], slot["group"], slot["reason"]) == (run_id, "interactive", "cancelled")
    (lease,) = pool.ignoring_cancellation()
    lease.cancelled_at -= 10  # as if it had ignored it for 10 s
    pool.renew_leases()
    assert any("still holds its slot" in r.getMessage() for r in caplog.records)
    let_go.set()
    wait_until(lambda: pool.held() == [], what="the handler to return")
    pool.report_seen()
    assert Worker.objects.get(id=pool.config.worker_id).cancelled_slots == []
