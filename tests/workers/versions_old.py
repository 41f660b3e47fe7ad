"""A deploy's older code: kind ``versions.k`` at version 1 only (and no
``versions.j``). Imported by a runworker of the older deploy
(RUNQUEUE_TEST_HANDLER_MODULES) and, through ``tests.workers.versions_new``, by the
tests themselves.

``versions.k`` makes two tool calls, ``a`` then ``b``; a run with
``{"hold": true}`` waits between them for the test to release it (or for
its worker to stop). Every call and every turn writes the test ledger.
"""

from __future__ import annotations

from typing import Any

import runqueue
from runqueue import Idempotency, RunContext
from tests.handlers import ledger, released

K = "versions.k"
J = "versions.j"


def step(run_id: str, n: int, idempotency_key: str) -> dict:
    """A side effect: one ledger row per call actually made."""
    ledger(run_id, "call", idempotency_key)
    return {"n": n}


def call(ctx: RunContext, name: str) -> Any:
    n = (ctx.payload or {}).get("n", 0)
    outcome = ctx.invoke_tool(
        name, step, args={"run_id": str(ctx.run.id), "n": n}, idempotency=Idempotency.IDEMPOTENT
    )
    return outcome.value


def hold(ctx: RunContext) -> None:
    """Wait for the test's release, or stop with the worker (RunCancelled)."""
    if not (ctx.payload or {}).get("hold"):
        return
    ledger(ctx.run.id, "holding", ctx.lease.owner)
    while not released(ctx.run.id):
        ctx.cancelled.wait(0.05)
        ctx.check()


def finished(ctx: RunContext, version: int, **more: Any) -> dict:
    return {"version": version, "owner": ctx.lease.owner, **more}


@runqueue.handler(K, version=1)
def k_v1(ctx: RunContext) -> Any:
    a = call(ctx, "a")
    hold(ctx)
    b = call(ctx, "b")
    return finished(ctx, 1, a=a, b=b)
