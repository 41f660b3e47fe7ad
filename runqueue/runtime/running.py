"""Running a claimed lease: the handler's context built from its last
checkpoint and records, the handler run (sync, or async on the loop),
and how the attempt ended decided as an outcome."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import cache

from django.db import InterfaceError, OperationalError
from django.utils.module_loading import import_string

from runqueue import leases, registry
from runqueue.conf import get_settings
from runqueue.db import connection_lost
from runqueue.errors import (
    MAX_DURATION,
    PERMANENT,
    ApprovalPending,
    RunCancelled,
    RunPaused,
    UnknownKind,
    classify,
)
from runqueue.leases.failures import failure_record, permanent_failure
from runqueue.leases.outcomes import (
    BudgetWait,
    Failed,
    GaveUp,
    Outcome,
    Released,
    Succeeded,
    Suspended,
    Waiting,
    positive_seconds,
    wake_time,
)
from runqueue.models import (
    Checkpoint,
    ToolInvocation,
    WaitReason,
)
from runqueue.runtime import aio
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.runtime.interrupted import interrupted_of
from runqueue.runtime.returns import AskUser, Wait
from runqueue.types import JSON
from runqueue.validation import check_state

logger = logging.getLogger("runqueue.runtime")


def build_context(lease: leases.Lease) -> RunContext:
    """Resume from the last checkpoint, with the tool records made since,
    and what the run it interrupted had done (``ctx.interrupted``)."""
    interrupted = interrupted_of(lease.run.interrupted_id) if lease.run.interrupted_id else None
    if lease.epoch == 1 and lease.run.forked_from_id is None:
        # The first lease the run ever had (submit starts at epoch 0 and
        # every transition bumps it): checkpoints and tool records are only
        # written under a lease, so there is nothing to resume from. A
        # fork's first lease replays the steps copied from the run it was
        # forked from (runqueue.leases.forks).
        return RunContext(lease, state=None, tool_seq=0, recorded={}, interrupted=interrupted)
    last = Checkpoint.objects.filter(run_id=lease.run_id).order_by("-seq").first()
    tool_seq = last.tool_seq if last else 0
    recorded = {
        tool.seq: tool
        for tool in ToolInvocation.objects.filter(run_id=lease.run_id, seq__gte=tool_seq)
    }
    return RunContext(
        lease,
        state=last.state if last else None,
        tool_seq=tool_seq,
        recorded=recorded,
        interrupted=interrupted,
    )


@cache
def _transient_classes(paths: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(import_string(p) for p in paths)


def decide(lease: leases.Lease) -> Outcome:
    """Run the handler for a claimed lease and say how the attempt ended.

    Writes no outcome (the worker's slot group does, fenced); the handler's
    own writes (checkpoints, tool records, events) go through the fence as
    it makes them. A database error under the handler is raised: the
    connection failed, nothing can be written now, and the lease is left to
    expire so the sweeper requeues the run (the only requeue path).
    An async handler runs on the process's loop; this thread waits for it.
    """
    try:
        fn = registry.lookup(lease.run.kind, lease.run.handler_version)
    except UnknownKind as exc:
        return _unhandled(lease, exc)
    if aio.is_async(fn):
        return aio.run(_decide_async(lease, fn)).result()
    ctx = build_context(lease)
    try:
        with max_duration(lease):
            result = fn(ctx)
    except Exception as exc:  # noqa: BLE001 - classified by the failure taxonomy
        if _database_lost(exc):
            raise
        ctx.text.flush()  # what it streamed, before its outcome
        return _raised(lease, exc)
    except BaseException as exc:
        if (pending := stopped_by(exc)) is None:
            raise
        ctx.text.flush()
        if isinstance(pending, Released):
            return pending
        result = pending
    ctx.text.flush()
    return _returned(lease, ctx, result)


async def decide_async(lease: leases.Lease) -> Outcome:
    """``decide`` for a slot on the loop: an async handler runs here, a sync
    one in a thread of its own (``aio.in_thread``)."""
    try:
        fn = registry.lookup(lease.run.kind, lease.run.handler_version)
    except UnknownKind as exc:
        return _unhandled(lease, exc)
    if not aio.is_async(fn):
        return await aio.in_thread(decide, lease)
    return await _decide_async(lease, fn)


def _unhandled(lease: leases.Lease, exc: UnknownKind) -> Outcome:
    """A claim takes only runs of the kinds and versions this process has
    (``registry.served``), so this is a registry changed since the claim:
    the run is given back, queued at once with its attempt returned, for a
    worker that has its handler. Never a dead letter."""
    logger.warning("Run id=%s: %s in this worker; giving it back", lease.run_id, exc)
    return Released("unhandled")


async def _decide_async(lease: leases.Lease, fn: Callable[..., Awaitable[JSON]]) -> Outcome:
    ctx = AsyncRunContext(await aio.db(build_context, lease))
    # The handler gets a task of its own, so a cancel that lands after it
    # returned cancels nothing else; the lease cancels it from any thread.
    task = asyncio.ensure_future(fn(ctx))
    loop = asyncio.get_running_loop()
    lease.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
    try:
        with max_duration(lease):
            result = await task
    except asyncio.CancelledError as exc:
        if not lease.cancelled.is_set():
            raise  # not the run's cancel: the loop itself is going away
        await aio.db(ctx.sync.text.flush)
        return _raised(lease, RunCancelled(lease.run_id, lease.cancel_reason), exc)
    except Exception as exc:  # noqa: BLE001 - classified by the failure taxonomy
        if _database_lost(exc):
            raise
        await aio.db(ctx.sync.text.flush)
        return _raised(lease, exc)
    except BaseException as exc:
        if (pending := stopped_by(exc)) is None:
            raise
        await aio.db(ctx.sync.text.flush)
        if isinstance(pending, Released):
            return pending
        result = pending
    await aio.db(ctx.sync.text.flush)
    return _returned(lease, ctx.sync, result)


@contextmanager
def max_duration(lease: leases.Lease) -> Iterator[None]:
    """While the handler runs: once the attempt has run the run's
    ``max_duration`` (counted from when its slot started it), its lease is
    cancelled as by the stop button, reason ``max_duration``: ``ctx.cancelled``
    set, an async handler's task cancelled; the attempt then fails for good
    (``_over_time``) and the heartbeat stops renewing its lease, so a
    handler that ignores the cancel is fenced by the lease's expiry
    (docs/decisions/sessions.md, "Run deadlines")."""
    seconds = lease.run.max_duration
    if seconds is None:
        yield
        return
    started = lease.started or time.monotonic()
    timer = threading.Timer(
        max(0.0, seconds - (time.monotonic() - started)), lease.cancel, args=(MAX_DURATION,)
    )
    timer.daemon = True
    timer.name = f"runqueue-max-duration-{lease.run_id}"
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _over_time(lease: leases.Lease) -> Outcome | None:
    """The attempt's outcome once its max_duration cancelled it: failed, for
    good (a retry would run as long again), whatever the handler did after."""
    if not (lease.cancelled.is_set() and lease.cancel_reason == MAX_DURATION):
        return None
    seconds = lease.run.max_duration
    return Failed(
        failure_record(
            None,
            classification=MAX_DURATION,
            attempt=lease.attempt,
            error_type="MaxDuration",
            message=f"the attempt ran longer than its max_duration of {seconds:g}s",
        )
    )


def _database_lost(exc: BaseException) -> bool:
    """The handler met a lost connection or a server that cannot take
    writes now (read-only, shutting down): no outcome can be written, so none
    is decided; the worker reconnects and the lease's expiry requeues the
    run. Never the run's failure."""
    return isinstance(exc, OperationalError | InterfaceError) or connection_lost(exc)


def _raised(lease: leases.Lease, exc: Exception, cause: BaseException | None = None) -> Outcome:
    """How an attempt whose handler raised ``exc`` ended."""
    if (over := _over_time(lease)) is not None:
        return over
    if lease.cancelled.is_set():
        if lease.cancel_reason == "stopping":
            return Released("shutdown")  # queued at once, the attempt handed back
        # Cancelled or lost: the outcome's write is fenced, as any would be.
        return GaveUp(exc)
    transient = _transient_classes(get_settings().TRANSIENT_EXCEPTIONS)
    if classify(exc, transient) == PERMANENT:
        logger.info("Run id=%s failed permanently: %r", lease.run_id, exc)
        return Failed(permanent_failure(exc, lease.attempt))
    return GaveUp(exc)


def stopped_by(exc: BaseException) -> Wait | Released | None:
    """The wait for a decision when the handler raised ApprovalPending (an
    agent SDK may have gathered it into an exception group): the run waits
    for the decision's signal, and resumes from its last checkpoint, so the
    handler replays up to the call and finds the decision there. No
    checkpoint is written for it (``state`` None): the call is inside a
    turn. RunPaused: the run is given back (Released "paused"), and waits
    queued, unclaimed, for its resume. None for any other exception."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := stopped_by(inner)) is not None:
                return found
        return None
    if isinstance(exc, RunPaused):
        return Released("paused")
    if not isinstance(exc, ApprovalPending):
        return None
    return Wait(
        reason=WaitReason.SIGNAL,
        state=None,
        name=leases.approval_signal(exc.seq),
        timeout=exc.timeout,
    )


def _returned(
    lease: leases.Lease, ctx: RunContext, result: JSON | AskUser | Wait | BudgetWait
) -> Outcome:
    """How an attempt whose handler returned ``result`` ended."""
    if (over := _over_time(lease)) is not None:
        return over
    if isinstance(result, BudgetWait):
        return result
    try:
        if isinstance(result, AskUser):
            return Waiting.of(result.question, result.state, ctx._seq, result.timeout)
        if isinstance(result, Wait):
            check_state(result.state)
            return Suspended(
                reason=result.reason,
                wait_name=result.name,
                # Checked again: a Wait made directly skipped the ctx call.
                until=wake_time(result.until),
                timeout=positive_seconds(result.timeout),
                state=result.state,
                tool_seq=ctx._seq,
                match=result.match,
            )
        return Succeeded.of(result)
    except ValueError as exc:
        return Failed(
            failure_record(
                exc,
                classification=PERMANENT,
                attempt=lease.attempt,
                message=f"the handler's result could not be stored: {exc}",
            )
        )
