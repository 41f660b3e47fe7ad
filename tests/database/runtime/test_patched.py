"""``ctx.patched(name)``: branching in place for a change of code. A run
that first reaches the patch in code that has it takes the new path, and
the decision is a recorded step, so its later attempts take it again; a run
that recorded a step there with code that had no patch gets False and
replays its old path. Sync and async contexts (the async one's work runs
on the loop's database threads, so these tests commit)."""

from __future__ import annotations

import asyncio

import pytest

import runqueue
from runqueue import leases, runtime, testing
from runqueue.models import Run, RunStatus, ToolInvocation
from runqueue.runtime import aio
from tests.helpers import claimed, expire_lease

pytestmark = pytest.mark.django_db(transaction=True)

#: Whether the handlers' "code" has the patch: the deploy in between.
CODE = {"patched": False}
CALLS: list[str] = []


@pytest.fixture(autouse=True)
def _code() -> object:
    CODE["patched"] = False
    CALLS.clear()
    yield
    aio.close_connections()


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    """The worker dies after the run's second step: nothing more is written."""


def _tool(name: str) -> dict:
    CALLS.append(name)
    return {"tool": name}


@runqueue.handler("patched.sync")
def patched_sync(ctx: runqueue.RunContext) -> dict:
    ctx.invoke_tool("a", _tool, args={"name": "a"})
    if CODE["patched"] and ctx.patched("use-c"):
        ctx.invoke_tool("c", _tool, args={"name": "c"})
        path = "new"
    else:
        ctx.invoke_tool("b", _tool, args={"name": "b"})
        path = "old"
    if (ctx.payload or {}).get("crash") and ctx.attempt == 1:
        raise _Crash
    ctx.invoke_tool("d", _tool, args={"name": "d"})
    return {"path": path}


async def _atool(name: str) -> dict:
    await asyncio.sleep(0)
    CALLS.append(name)
    return {"tool": name}


@runqueue.handler("patched.async")
async def patched_async(ctx: runtime.AsyncRunContext) -> dict:
    await ctx.invoke_tool("a", _atool, args={"name": "a"})
    if CODE["patched"] and await ctx.patched("use-c"):
        await ctx.invoke_tool("c", _atool, args={"name": "c"})
        path = "new"
    else:
        await ctx.invoke_tool("b", _atool, args={"name": "b"})
        path = "old"
    if (ctx.payload or {}).get("crash") and ctx.attempt == 1:
        raise _Crash
    await ctx.invoke_tool("d", _atool, args={"name": "d"})
    return {"path": path}


KINDS = ["patched.sync", "patched.async"]


def _crash_then_retry(run_id: object) -> str:
    """The first attempt dies after its second step; the lease expires and
    the run is claimed and run again."""
    with pytest.raises(_Crash):
        testing.execute(claimed(lease_seconds=30))
    expire_lease(run_id)
    leases.sweep()
    return testing.execute(claimed(lease_seconds=30))


def _steps(run_id: object) -> list[tuple[str, dict]]:
    return list(
        ToolInvocation.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list("tool", "arguments")
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_that_reaches_the_patch_in_patched_code_takes_it_and_keeps_it(
    kind: str, fast_retry
) -> None:
    """The decision is a step of its own (``runqueue.patched``): the retry
    replays it, so the run stays on the new path, and no tool runs twice."""
    CODE["patched"] = True
    run_id = runqueue.submit(kind=kind, payload={"crash": True}).run.id
    assert _crash_then_retry(run_id) == "succeeded"
    assert Run.objects.get(id=run_id).result == {"path": "new"}
    assert _steps(run_id) == [
        ("a", {"name": "a"}),
        (runtime.PATCH_TOOL, {"name": "use-c"}),
        ("c", {"name": "c"}),
        ("d", {"name": "d"}),
    ]
    assert CALLS == ["a", "c", "d"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_that_passed_the_point_without_the_patch_replays_its_old_path(
    kind: str, fast_retry
) -> None:
    """Old code recorded ``b`` where the patch now stands; the new code's
    retry gets False there and replays ``b``: no PermanentError, no new step
    before ``d``."""
    run_id = runqueue.submit(kind=kind, payload={"crash": True}).run.id
    with pytest.raises(_Crash):
        testing.execute(claimed(lease_seconds=30))
    CODE["patched"] = True  # the deploy
    expire_lease(run_id)
    leases.sweep()
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    run = Run.objects.get(id=run_id)
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"path": "old"})
    assert [tool for tool, _ in _steps(run_id)] == ["a", "b", "d"]
    assert CALLS == ["a", "b", "d"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_that_had_not_reached_the_patch_takes_it(kind: str, fast_retry) -> None:
    """Old code recorded only ``a``; at the patch's place the run has no
    step, so the new code's retry takes the patch."""
    run_id = runqueue.submit(kind=kind).run.id
    first = claimed(lease_seconds=30)
    assert leases.record_tool_started(
        first, seq=0, tool="a", idempotency="non_idempotent", arguments={"name": "a"}
    )
    assert leases.record_tool_outcome(first, seq=0, status="completed", result={"tool": "a"})
    CODE["patched"] = True
    expire_lease(run_id)
    leases.sweep()
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=run_id).result == {"path": "new"}
    assert CALLS == ["c", "d"]


def test_a_patch_name_is_checked() -> None:
    @runqueue.handler("patched.bad_name")
    def bad_name(ctx: runqueue.RunContext) -> object:
        for name in ("", "x" * 256, 7, "nul\x00"):
            with pytest.raises(ValueError, match="a patch's name "):
                ctx.patched(name)  # type: ignore[arg-type]
        return "checked"

    run_id = runqueue.submit(kind="patched.bad_name").run.id
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert not ToolInvocation.objects.filter(run_id=run_id).exists()


def test_a_fenced_handler_records_no_decision() -> None:
    @runqueue.handler("patched.fenced")
    def fenced(ctx: runqueue.RunContext) -> object:
        expire_lease(ctx.run.id)
        leases.sweep()  # another owner's epoch now
        return ctx.patched("late")

    run_id = runqueue.submit(kind="patched.fenced").run.id
    assert testing.execute(claimed(lease_seconds=30)) == "fenced"
    assert not ToolInvocation.objects.filter(run_id=run_id).exists()
