"""Claim, heartbeat, fenced writes, finish, give up, sweep and cancel.

With ``submit.py``, the only writer of runs. Every worker transaction starts
with an UPDATE of the run row that asserts ``id``, ``lease_epoch`` and
``status = 'running'``; it writes other rows only if that returned a row.
Zero rows means fenced: the transaction rolls back, ``run.fenced`` is
appended in a transaction of its own, and the worker writes nothing else.
Every transition made by anyone but the owner bumps ``lease_epoch``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Max
from django.utils import timezone
from psycopg.types.json import Jsonb

from runqueue import events
from runqueue.conf import get_settings
from runqueue.errors import (
    PERMANENT,
    TRANSIENT,
    ActiveRunConflict,
    InvalidTransition,
    RunNotFound,
)
from runqueue.models import (
    TERMINAL_STATUSES,
    Checkpoint,
    PriorityClass,
    Run,
    RunStatus,
    ToolInvocation,
    ToolStatus,
)
from runqueue.sql import execute, prepared

logger = logging.getLogger("runqueue.leases")

ALL_CLASSES: tuple[PriorityClass, ...] = tuple(PriorityClass)


@dataclass
class Hooks:
    """Pause points for tests that interleave real connections (River's
    TestSignals). Both are None in production."""

    #: Called inside a worker transaction, after the fence row, before commit.
    inside_fence: Callable[[Lease, str], None] | None = None
    #: Called inside the sweep's transaction, after its UPDATE, before commit.
    inside_sweep: Callable[[list[tuple]], None] | None = None


hooks = Hooks()


@dataclass(eq=False)
class Lease:
    """A worker's hold on one run at one epoch; shared by its threads."""

    run: Run
    owner: str
    lease_seconds: float
    #: Another worker owns the run now (or it was cancelled): write nothing.
    fenced: bool = False
    #: This worker finished, gave up or released the run: the lease is spent.
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # One worker transaction at a time per lease (handler and heartbeat
    # threads share it), so a heartbeat never races its own finish.
    _write_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def run_id(self) -> Any:
        return self.run.id

    @property
    def epoch(self) -> int:
        return self.run.lease_epoch

    @property
    def attempt(self) -> int:
        return self.run.attempts


def backoff(attempts: int, *, rng: random.Random | None = None) -> float:
    """Seconds before retry number ``attempts``: base * 2**(attempts-1), capped, jittered.

    With the defaults (base 2 s, cap 600 s, jitter 0.2): about 2, 4, 8, ... s,
    each multiplied by a random factor in [0.8, 1.2).
    """
    conf = get_settings()
    delay = min(conf.BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0), conf.BACKOFF_MAX_SECONDS)
    jitter = conf.BACKOFF_JITTER * (2 * (rng or random).random() - 1)
    return max(delay * (1 + jitter), 0.0)


def failure_record(
    exc: BaseException | None, *, classification: str, attempt: int, message: str | None = None
) -> dict[str, Any]:
    """The dead-letter record kept in ``Run.failure``: enough to act on."""
    return {
        "classification": classification,
        "error_type": type(exc).__name__ if exc is not None else None,
        "message": message if message is not None else str(exc),
        "traceback": "".join(traceback.format_exception(exc)) if exc is not None else None,
        "attempt": attempt,
    }


# --- claim -----------------------------------------------------------------


def claim(
    owner: str,
    classes: Iterable[PriorityClass] = ALL_CLASSES,
    *,
    limit: int = 1,
    lease_seconds: float | None = None,
) -> list[Lease]:
    """Claim up to ``limit`` due runs from ``classes``, by priority then age."""
    classes = tuple(PriorityClass(c) for c in classes)
    if not classes:
        raise ValueError("claim needs at least one priority class")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    seconds = get_settings().LEASE_SECONDS if lease_seconds is None else lease_seconds
    params = {
        "owner": owner,
        "lease_seconds": float(seconds),
        "limit": limit,
        "min_priority": min(c.bounds[0] for c in classes),
        "max_priority": max(c.bounds[1] for c in classes),
        "class_indexes": sorted({int(c) // 10 for c in classes}),
    }
    if connection.in_atomic_block:
        with transaction.atomic(durable=True):  # raises: a claim is never nested
            runs = _claim_rows(params)
    else:
        # One statement (the event is in it): in autocommit, a transaction
        # of its own, without the round trips of BEGIN and COMMIT.
        runs = _claim_rows(params)
    return [Lease(run=run, owner=owner, lease_seconds=float(seconds)) for run in runs]


def _claim_rows(params: dict[str, Any]) -> list[Run]:
    with prepared("claim", params) as cursor:
        names = [column.name for column in cursor.description]
        rows = cursor.fetchall()
    return [_run_from_row(names, row) for row in rows]


@cache
def _run_loaders() -> dict[str, tuple[str, tuple[Callable[..., Any], ...]]]:
    """Per column of runqueue_run: its field's attname and the converters
    Django applies to values read from the database (JSON fields)."""
    loaders = {}
    for f in Run._meta.concrete_fields:
        col = f.get_col(Run._meta.db_table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        loaders[f.column] = (f.attname, tuple(converters))
    return loaders


def _run_from_row(names: list[str], row: tuple) -> Run:
    """A Run instance from a raw row of ``runqueue_run`` (what ``raw()`` does)."""
    loaders = _run_loaders()
    values = {}
    for name, value in zip(names, row, strict=True):
        attname, converters = loaders[name]
        for convert in converters:
            value = convert(value, None, connection)
        values[attname] = value
    return Run.from_db(
        connection.alias,
        [f.attname for f in Run._meta.concrete_fields],
        [values[f.attname] for f in Run._meta.concrete_fields],
    )


def claim_one(
    owner: str, classes: Iterable[PriorityClass] = ALL_CLASSES, **kwargs: Any
) -> Lease | None:
    """Claim the next due run from ``classes``, or None."""
    leases = claim(owner, classes, limit=1, **kwargs)
    return leases[0] if leases else None


# --- the fence ---------------------------------------------------------------


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc.__cause__, "sqlstate", None)


def _still_owned(lease: Lease) -> bool:
    return Run.objects.filter(
        id=lease.run_id, lease_epoch=lease.epoch, status=RunStatus.RUNNING
    ).exists()


def _record_fenced(lease: Lease, action: str) -> None:
    """Append run.fenced once per lease, after the fenced transaction rolled back."""
    with lease._lock:
        if lease.fenced:
            return
        lease.fenced = True
    current = Run.objects.filter(id=lease.run_id).values_list("lease_epoch", "status").first()
    logger.warning(
        "Fenced run id=%s epoch=%s action=%s now=%s", lease.run_id, lease.epoch, action, current
    )
    if current is None:
        return
    with transaction.atomic(durable=True):
        events.append(
            lease.run_id,
            events.FENCED,
            lease.epoch,
            {
                "owner": lease.owner,
                "action": action,
                "current_epoch": current[0],
                "current_status": current[1],
            },
        )


def _fenced(
    lease: Lease,
    action: str,
    fence: str,
    params: dict[str, Any] | None = None,
    write: Callable[[tuple], None] | None = None,
    *,
    closes: bool = False,
) -> tuple | None:
    """Run one worker transaction behind the fence; the fence row, or None if
    fenced (or the lease is already spent). ``closes``: this write ends the lease."""
    with lease._write_lock:
        if lease.fenced or lease.closed:
            return None
        row = _fenced_transaction(lease, action, fence, params, write)
        if row is not None and closes:
            lease.closed = True
        return row


def _fenced_transaction(
    lease: Lease,
    action: str,
    fence: str,
    params: dict[str, Any] | None,
    write: Callable[[tuple], None] | None,
) -> tuple | None:
    try:
        if write is None and hooks.inside_fence is None and not connection.in_atomic_block:
            # The fence is the whole transaction (a heartbeat, or a finish
            # whose event is in the same statement): one statement in
            # autocommit, so no BEGIN and COMMIT round trips.
            row = _fence_row(lease, fence, params)
            if row is None:
                raise _FencedError  # zero rows: fenced, nothing was written
            return row
        with transaction.atomic(durable=True):
            row = _fence_row(lease, fence, params)
            if row is None:
                # Zero rows: fenced. Roll back and write nothing else here.
                raise _FencedError
            if write is not None:
                write(row)
            if hooks.inside_fence is not None:
                hooks.inside_fence(lease, action)
            return row
    except _FencedError:
        pass
    except OperationalError as exc:
        # 40001 on a fenced write means "possibly fenced": re-read, never retry blindly.
        if _sqlstate(exc) != "40001" or _still_owned(lease):
            raise
    _record_fenced(lease, action)
    return None


class _FencedError(Exception):
    pass


def _fence_row(lease: Lease, fence: str, params: dict[str, Any] | None) -> tuple | None:
    """Run the fence statement; its row, or None when it matched nothing."""
    with prepared(fence, {"run_id": lease.run_id, "epoch": lease.epoch, **(params or {})}) as cur:
        return cur.fetchone()


def _renew_params(lease: Lease) -> dict[str, Any]:
    return {"lease_seconds": lease.lease_seconds}


# --- worker writes -------------------------------------------------------------


def heartbeat(lease: Lease) -> bool:
    """Renew the lease; False once fenced (never raises for that)."""
    return _fenced(lease, "heartbeat", "fence_renew", _renew_params(lease)) is not None


def append_event(lease: Lease, type_: str, data: dict[str, Any] | None = None) -> bool:
    """A handler's own event, fenced like every worker write."""

    def write(_row: tuple) -> None:
        events.append(lease.run_id, type_, lease.epoch, data)

    return _fenced(lease, "event", "fence_renew", _renew_params(lease), write) is not None


def _next_checkpoint_seq(run_id: Any) -> int:
    last = Checkpoint.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"]
    return 0 if last is None else last + 1


def _save_checkpoint(lease: Lease, state: Any, tool_seq: int) -> None:
    seq = _next_checkpoint_seq(lease.run_id)
    Checkpoint.objects.create(
        run_id=lease.run_id, seq=seq, state=state, tool_seq=tool_seq, lease_epoch=lease.epoch
    )
    events.append(lease.run_id, events.CHECKPOINTED, lease.epoch, {"seq": seq})


def checkpoint(lease: Lease, state: Any, *, tool_seq: int = 0) -> bool:
    """Save the handler's state (and renew the lease); False once fenced.

    ``tool_seq`` is how many tool invocations the handler has made so far:
    on resume from this checkpoint, numbering continues from it.
    """
    _check_json(state, "checkpoint state")
    return (
        _fenced(
            lease,
            "checkpoint",
            "fence_renew",
            _renew_params(lease),
            lambda _row: _save_checkpoint(lease, state, tool_seq),
        )
        is not None
    )


def record_tool_started(
    lease: Lease, *, seq: int, tool: str, idempotency: str, arguments: Any
) -> bool:
    """Record a tool call as started, committed, before it runs; False once fenced."""

    def write(_row: tuple) -> None:
        ToolInvocation.objects.update_or_create(
            run_id=lease.run_id,
            seq=seq,
            defaults={
                "tool": tool,
                "idempotency": idempotency,
                "status": ToolStatus.STARTED,
                "arguments": arguments,
                "result": None,
                "error": None,
                "lease_epoch": lease.epoch,
                "finished_at": None,
            },
        )
        events.append(
            lease.run_id,
            events.TOOL_STARTED,
            lease.epoch,
            {"seq": seq, "tool": tool, "idempotency": idempotency},
        )

    _check_json(arguments, "tool arguments")
    return _fenced(lease, "tool.started", "fence_renew", _renew_params(lease), write) is not None


_TOOL_EVENT = {
    ToolStatus.COMPLETED: events.TOOL_COMPLETED,
    ToolStatus.FAILED: events.TOOL_FAILED,
    ToolStatus.UNCERTAIN: events.TOOL_UNCERTAIN,
}


def record_tool_outcome(
    lease: Lease, *, seq: int, status: str, result: Any = None, error: Any = None
) -> bool:
    """Record how a started tool call ended: completed, failed or uncertain."""
    if status not in _TOOL_EVENT:
        raise ValueError(f"not a tool outcome: {status!r}")

    def write(_row: tuple) -> None:
        updated = ToolInvocation.objects.filter(run_id=lease.run_id, seq=seq).update(
            status=status,
            result=result,
            error=error,
            lease_epoch=lease.epoch,
            finished_at=timezone.now(),
        )
        if updated != 1:
            raise ValueError(f"no tool invocation #{seq} for run {lease.run_id}")
        events.append(lease.run_id, _TOOL_EVENT[status], lease.epoch, {"seq": seq})

    _check_json(result, "tool result")
    return _fenced(lease, "tool." + status, "fence_renew", _renew_params(lease), write) is not None


def succeed(lease: Lease, result: Any = None) -> bool:
    """Finish the run as succeeded with ``result``; False once fenced."""
    _check_json(result, "result")
    params = {
        "status": RunStatus.SUCCEEDED,
        "result": Jsonb(result),
        "failure": None,
        "event_type": events.SUCCEEDED,
        "event_data": Jsonb({"attempt": lease.attempt}),
    }
    return _fenced(lease, "succeed", "fence_finish", params, closes=True) is not None


def fail(lease: Lease, failure: dict[str, Any]) -> bool:
    """Dead-letter the run now (a permanent failure); False once fenced."""
    params = {
        "status": RunStatus.FAILED,
        "result": None,
        "failure": Jsonb(failure),
        "event_type": events.FAILED,
        "event_data": Jsonb(_failure_summary(failure)),
    }
    return _fenced(lease, "fail", "fence_finish", params, closes=True) is not None


def give_up(lease: Lease, exc: BaseException | None = None) -> bool:
    """Give the lease up after a transient error: requeued with backoff, or dead-lettered."""
    failure = failure_record(
        exc,
        classification=TRANSIENT,
        attempt=lease.attempt,
        message=f"transient error on the last attempt ({lease.attempt}): {exc}",
    )

    def write(row: tuple) -> None:
        _id, status, epoch, attempts, scheduled_for = row
        if status == RunStatus.FAILED:
            events.append(lease.run_id, events.FAILED, epoch, _failure_summary(failure))
        else:
            events.append(
                lease.run_id,
                events.REQUEUED,
                epoch,
                {
                    "reason": TRANSIENT,
                    "attempt": attempts,
                    "expired_epoch": lease.epoch,
                    "scheduled_for": scheduled_for.isoformat(),
                    "error_type": failure["error_type"],
                    "message": str(exc),
                },
            )
            notify(lease.run.priority)

    params = {"backoff_seconds": backoff(lease.attempt), "failure": Jsonb(failure)}
    return _fenced(lease, "give_up", "fence_give_up", params, write, closes=True) is not None


def wait_for_user(lease: Lease, question: Any, state: Any = None, *, tool_seq: int = 0) -> bool:
    """End the turn waiting for the user; the run keeps its session slot."""
    _check_json(question, "question")
    _check_json(state, "checkpoint state")

    def write(_row: tuple) -> None:
        if state is not None:
            _save_checkpoint(lease, state, tool_seq)
        events.append(lease.run_id, events.WAITING, lease.epoch, {"question": question})

    return _fenced(lease, "wait_for_user", "fence_wait", None, write, closes=True) is not None


def release(lease: Lease, reason: str) -> bool:
    """Give a run back unfinished (worker shutdown): queued at once, the
    attempt returned, the epoch bumped so a handler still running is fenced."""

    def write(row: tuple) -> None:
        events.append(
            lease.run_id, events.REQUEUED, row[1], {"reason": reason, "attempt": lease.attempt}
        )
        notify(lease.run.priority)

    return _fenced(lease, "release", "fence_release", None, write, closes=True) is not None


def _failure_summary(failure: dict[str, Any]) -> dict[str, Any]:
    return {k: failure.get(k) for k in ("classification", "error_type", "message", "attempt")}


def permanent_failure(exc: BaseException, attempt: int) -> dict[str, Any]:
    return failure_record(exc, classification=PERMANENT, attempt=attempt)


# --- transitions by others: sweep, cancel ------------------------------------


def sweep(
    *, limit: int = 100, after_read: Callable[[Sequence[tuple]], None] | None = None
) -> list[tuple]:
    """Requeue (with backoff) or dead-letter runs whose lease expired.

    The UPDATE re-checks epoch, status and expiry against what was read, so
    a run finished or renewed in between is left alone. ``after_read`` is a
    test hook called between the read and the update.
    """
    with connection.cursor() as cursor:
        rows = execute(cursor, "expired_leases", {"limit": limit}).fetchall()
    if not rows:
        return []
    if after_read is not None:
        after_read(rows)
    params = {
        "ids": [r[0] for r in rows],
        "epochs": [r[1] for r in rows],
        "delays": [backoff(r[2]) for r in rows],
    }
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            swept = execute(cursor, "sweep_expired", params).fetchall()
        if hooks.inside_sweep is not None:
            hooks.inside_sweep(swept)
        if any(status == RunStatus.QUEUED for _id, status, _e, _a in swept):
            notify(None)
    for run_id, status, epoch, attempts in swept:
        logger.info("Swept run id=%s to %s epoch=%s attempt=%s", run_id, status, epoch, attempts)
    return swept


def cancel(run_id: Any, *, reason: str, actor: str) -> Run:
    """Cancel a non-terminal run; the epoch bump fences a worker still running it."""
    with transaction.atomic(durable=True):
        with connection.cursor() as cursor:
            row = execute(cursor, "cancel", {"run_id": run_id}).fetchone()
        if row is None:
            status = Run.objects.filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(run_id)
            raise InvalidTransition(run_id, status, "cancel")
        events.append(run_id, events.CANCELLED, row[1], {"reason": reason, "actor": actor})
    return Run.objects.get(id=run_id)


def requeue(run_id: Any, *, actor: str, reason: str = "") -> Run:
    """An operator's requeue of a dead-lettered run.

    Raises RunNotFound, InvalidTransition (not failed) or ActiveRunConflict
    (its session has another active run now).
    """
    previous = Run.objects.filter(id=run_id).values_list("status", "failure", "session_id").first()
    if previous is None:
        raise RunNotFound(run_id)
    status, failure, session_id = previous
    try:
        with transaction.atomic(durable=True):
            with connection.cursor() as cursor:
                row = execute(cursor, "operator_requeue", {"run_id": run_id}).fetchone()
            if row is None:
                current = Run.objects.values_list("status", flat=True).get(id=run_id)
                raise InvalidTransition(run_id, current, "requeue")
            events.append(
                run_id,
                events.OPERATOR_REQUEUED,
                row[1],
                {"actor": actor, "reason": reason, "previous_failure": failure},
            )
            notify(row[2])
    except IntegrityError as exc:
        active = Run.objects.active().filter(session_id=session_id).exclude(id=run_id).first()
        raise ActiveRunConflict(
            session_id or "", active.id if active else None, active.status if active else None
        ) from exc
    return Run.objects.get(id=run_id)


def resolve_uncertain(
    tool_invocation_id: int, *, happened: bool, note: str, actor: str
) -> ToolInvocation:
    """Record an operator's answer for an uncertain tool invocation: did it happen?"""
    with transaction.atomic(durable=True):
        tool = (
            ToolInvocation.objects.select_for_update()
            .select_related("run")
            .filter(id=tool_invocation_id)
            .first()
        )
        if tool is None:
            raise LookupError(f"no tool invocation {tool_invocation_id}")
        if tool.status != ToolStatus.UNCERTAIN or tool.resolution is not None:
            raise InvalidTransition(tool.run_id, tool.status, "resolve this tool invocation of")
        tool.resolution = {
            "happened": happened,
            "note": note,
            "actor": actor,
            "at": timezone.now().isoformat(),
        }
        tool.save(update_fields=["resolution"])
        events.append(
            tool.run_id,
            events.TOOL_RESOLVED,
            tool.run.lease_epoch,
            {
                "seq": tool.seq,
                "tool": tool.tool,
                "happened": happened,
                "note": note,
                "actor": actor,
            },
        )
    return tool


def prune_terminal_runs(
    *, older_than_seconds: float, batch: int = 500, heartbeat: Callable[[], bool] | None = None
) -> int:
    """Delete terminal runs finished longer ago than that, with their events,
    tool records, checkpoints and keys; in batches."""
    deleted = 0
    cutoff = timezone.now() - dt.timedelta(seconds=older_than_seconds)
    while True:
        ids = list(
            Run.objects.filter(status__in=TERMINAL_STATUSES, finished_at__lt=cutoff).values_list(
                "id", flat=True
            )[:batch]
        )
        if not ids:
            return deleted
        with transaction.atomic():
            Run.objects.filter(id__in=ids, status__in=TERMINAL_STATUSES).delete()
        deleted += len(ids)
        if heartbeat is not None and not heartbeat():
            return deleted


# --- helpers -----------------------------------------------------------------


def notify(priority: int | None) -> None:
    """Wake idle workers of a class (all classes when None), on commit."""
    payload = "" if priority is None else PriorityClass.of(priority).name.lower()
    with connection.cursor() as cursor:
        execute(cursor, "notify", {"channel": get_settings().NOTIFY_CHANNEL, "payload": payload})


def _check_json(value: Any, what: str) -> None:
    """Reject what PostgreSQL's jsonb would refuse, before anything is written."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from exc
    if "\\u0000" in text:
        raise ValueError(f"{what} contains a NUL character, which PostgreSQL cannot store")
