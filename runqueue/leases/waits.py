"""Durable waits: a turn that ends waiting for its children, a signal or a
time, the signal that ends one (or waits in the mailbox for it), and the
deadline service's resume of waits whose time has come.

A wait's transition, a signal and a child's join each take the run's row
lock first, and read what the others wrote only in a later statement of
the same transaction: so a signal is delivered exactly once whichever
comes first, and a parent resumes exactly once however its children end.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from runqueue import events
from runqueue.conf import get_settings
from runqueue.errors import (
    InvalidArgument,
    InvalidTransition,
    MailboxFull,
    SignalTooLarge,
)
from runqueue.leases.base import Lease, check_json_size, lock_run, notify, retry_moved
from runqueue.leases.checkpoints import save_checkpoint
from runqueue.leases.fence import fenced, renew_params
from runqueue.leases.outcomes import positive_seconds, wake_time
from runqueue.leases.transitions import checked_operation
from runqueue.models import TERMINAL_STATUSES, Run, RunStatus, Signal, WaitReason
from runqueue.sql import execute, prepared
from runqueue.types import JSON
from runqueue.validation import check_state, json_text, text_problem

#: The longest signal name: its column's length.
SIGNAL_NAME_MAX_LENGTH = Signal._meta.get_field("name").max_length or 255

#: The deadline service resumes at most this many waits per statement.
RESUME_BATCH = 500

Delivery = Literal["delivered", "kept"]


def signal_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a signal, or None."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name:
        return "must not be empty"
    if len(name) > SIGNAL_NAME_MAX_LENGTH:
        return f"must be at most {SIGNAL_NAME_MAX_LENGTH} characters, got {len(name)}"
    return text_problem(name)


def event_match_problem(match: object) -> str | None:
    """Why ``match`` cannot be an event wait's or trigger's match (a JSON
    object the event's data must contain), or None."""
    if not isinstance(match, dict):
        return f"must be a JSON object, got {type(match).__name__}"
    try:
        text = json_text(match, "match")
    except ValueError as exc:
        return str(exc)
    if len(text.encode()) > MATCH_MAX_BYTES:
        return f"must be at most {MATCH_MAX_BYTES} bytes as JSON"
    return None


#: The largest match, as JSON: a filter, not a document.
MATCH_MAX_BYTES = 4096


def suspend(
    lease: Lease,
    reason: str,
    *,
    name: str = "",
    until: dt.datetime | None = None,
    timeout: float | None = None,
    state: JSON = None,
    tool_seq: int = 0,
    match: dict[str, JSON] | None = None,
) -> bool:
    """End the turn waiting for ``reason`` (children, signal, event or
    timer), fenced; False once fenced. The run holds no lease and no slot
    while it waits; when what it waits for is there already (a child count
    of 0, a kept signal, an event received within the retention window that
    contains ``match``) it is queued again at once (``run.resumed``)."""
    waits = (WaitReason.CHILDREN, WaitReason.SIGNAL, WaitReason.TIMER, WaitReason.EVENT)
    if reason not in waits:
        raise ValueError(f"not a wait reason a handler returns: {reason!r}")
    # ValueError before anything is written, never a DataError in the write.
    until, timeout = wake_time(until), positive_seconds(timeout)
    if (
        reason in (WaitReason.SIGNAL, WaitReason.EVENT)
        and (problem := signal_name_problem(name)) is not None
    ):
        raise ValueError(f"a {reason}'s name {problem}")
    if reason == WaitReason.EVENT:
        match = {} if match is None else match
        if (problem := event_match_problem(match)) is not None:
            raise ValueError(f"an event wait's match {problem}")
    else:
        match = None
    check_state(state)

    def write(_row: tuple) -> None:
        if state is not None:
            save_checkpoint(lease, state, tool_seq, turn_end=True)
        params = {
            "run_id": lease.run_id,
            "reason": str(reason),
            "name": name,
            "until": until,
            "timeout": timeout,
            "tenant": lease.run.tenant,
            "match": None if match is None else Jsonb(match),
            "window": get_settings().EVENT_RETENTION_SECONDS,
        }
        with connection.cursor() as cursor:
            if reason == WaitReason.EVENT:
                # After the fence's row lock: events of this name in flight
                # commit first (suspend sees them), later ones find it waiting.
                lock = {"tenant": lease.run.tenant, "name": name}
                execute(cursor, "event_name_exclusive", lock).fetchone()
            status, epoch, wait_until, priority = execute(cursor, "suspend", params).fetchone()
        data: dict[str, JSON] = {
            "reason": str(reason),
            "name": name,
            "until": wait_until.isoformat() if wait_until else None,
        }
        if match is not None:
            data["match"] = match
        events.append(lease.run_id, events.SUSPENDED, lease.epoch, data)
        if status == RunStatus.QUEUED:
            events.append(lease.run_id, events.RESUMED, epoch, {"reason": reason, "at_once": True})
            notify(priority)

    return (
        fenced(lease, "suspend", "fence_renew", renew_params(lease), write, closes=True)
        is not None
    )


def signal(run_id: uuid.UUID | str, name: str, data: JSON = None) -> Delivery:
    """Send signal ``name`` with ``data`` to a run: ``delivered`` if the run
    was waiting for it (it is queued again, ``data`` its ``ctx.input``),
    ``kept`` if not (its mailbox keeps it for the wait that names it, even
    before the run is first claimed). Raises InvalidArgument (nothing
    written; SignalTooLarge past ``SIGNAL_MAX_BYTES``), MailboxFull (the
    mailbox keeps ``SIGNALS_KEPT_MAX`` already), RunNotFound, or
    InvalidTransition for a finished run."""
    parsed = checked_operation("signal", run_id)
    if (problem := signal_name_problem(name)) is not None:
        raise InvalidArgument("signal", "name", problem)
    limit = get_settings().SIGNAL_MAX_BYTES
    check_json_size("signal", "data", data, "signal data", limit, too_large=SignalTooLarge)
    return retry_moved(lambda: _signal(parsed, name, data))


def _signal(run_id: uuid.UUID, name: str, data: JSON) -> Delivery:
    """Deliver or keep, under the run's row lock: concurrent signals to one
    run count its mailbox one after the other, so it never holds more than
    SIGNALS_KEPT_MAX."""
    with transaction.atomic(durable=True):
        status, wait_reason, wait_name, priority = lock_run(run_id)
        if status in TERMINAL_STATUSES:
            raise InvalidTransition(run_id, status, "signal")
        if status == RunStatus.WAITING and (wait_reason, wait_name) == ("signal", name):
            params = {"run_id": run_id, "name": name, "data": Jsonb(data)}
            with connection.cursor() as cursor:
                _id, epoch = execute(cursor, "resume_signal", params).fetchone()
            events.append(run_id, events.RESUMED, epoch, {"reason": "signal", "name": name})
            notify(priority)
            return "delivered"
        most = get_settings().SIGNALS_KEPT_MAX
        if Signal.objects.filter(run_id=run_id).values("pk")[:most].count() >= most:
            raise MailboxFull(run_id, most)
        Signal.objects.create(run_id=run_id, name=name, data=data)
        epoch = Run.objects.values_list("lease_epoch", flat=True).get(id=run_id)
        events.append(run_id, events.SIGNAL_KEPT, epoch, {"name": name})
    return "kept"


def deliver_event(
    tenant: str, name: str, event_id: int, key: str, data: dict[str, JSON]
) -> list[uuid.UUID]:
    """End every wait of ``tenant``'s runs for event ``name`` whose match
    ``data`` contains, in the caller's transaction, which inserted the event
    (row ``event_id``) holding its (tenant, name) lock shared
    (``event_name_shared``): each run queued again with the event as its
    input (``run.resumed``, a NOTIFY). The woken runs' ids."""
    params = {"tenant": tenant, "name": name, "event_id": event_id, "data": Jsonb(data)}
    with connection.cursor() as cursor:
        rows = execute(cursor, "deliver_event", params).fetchall()
    for run_id, epoch, priority in rows:
        resumed = {"reason": "event", "name": name, "key": key}
        events.append(run_id, events.RESUMED, epoch, resumed)
        notify(priority)
    return [run_id for run_id, _epoch, _priority in rows]


def deliver_input(run_id: uuid.UUID | str, data: JSON = None) -> Run:
    """Answer a run waiting for the user (``ctx.ask_user``) with ``data``,
    whatever its session, as a submit to its session does: it is queued
    again in place, ``data`` its ``ctx.input``. The run as it is now.
    Raises InvalidArgument (nothing written), RunNotFound, or
    InvalidTransition when it does not wait for the user (answered already,
    timed out, finished)."""
    parsed = checked_input(run_id, data)
    return retry_moved(lambda: _deliver_input(parsed, data))


def checked_input(run_id: uuid.UUID | str, data: JSON) -> uuid.UUID:
    """The run id of an input delivery, or InvalidArgument (a malformed id,
    input that jsonb cannot store or over ``MAX_PAYLOAD_BYTES``)."""
    parsed = checked_operation("deliver_input", run_id)
    limit = get_settings().MAX_PAYLOAD_BYTES
    check_json_size("deliver_input", "input", data, "input", limit)
    return parsed


def _deliver_input(run_id: uuid.UUID, data: JSON) -> Run:
    with transaction.atomic(durable=True):
        deliver_waiting(run_id, data)
    return Run.objects.get(id=run_id)


def deliver_waiting(run_id: uuid.UUID, data: JSON) -> None:
    """Input delivery in the caller's transaction (``checked_input`` done):
    the run's row locked, RunNotFound, or InvalidTransition unless it waits
    for the user."""
    status, _reason, _name, priority = lock_run(run_id)
    if status != RunStatus.WAITING_FOR_USER:
        raise InvalidTransition(run_id, status, "deliver input to")
    deliver_locked(run_id, priority, data)


def deliver_locked(run_id: uuid.UUID, priority: int, data: JSON) -> None:
    """Input delivery to a run waiting for the user whose row lock the
    caller's transaction holds: queued again, its event, a NOTIFY."""
    with connection.cursor() as cursor:
        params = {"run_id": run_id, "input": Jsonb(data)}
        (_id, epoch) = execute(cursor, "deliver_input", params).fetchone()
    events.append(run_id, events.INPUT_DELIVERED, epoch, {"input": data})
    notify(priority)


def resume_due(limit: int = RESUME_BATCH) -> int:
    """Resume every wait whose deadline has passed (the database's clock),
    ``limit`` per statement; how many were resumed. The worker's deadline
    service runs it."""
    total = 0
    params = {"limit": limit, "channel": get_settings().NOTIFY_CHANNEL}

    def statement() -> int:
        with prepared("resume_due", params) as cursor:
            return len(cursor.fetchall())

    while True:
        # A waiting run cancelled meanwhile moved partitions: run it again.
        n = retry_moved(statement)
        total += n
        if n < limit:
            return total


def next_deadline() -> float | None:
    """Seconds until the earliest wait's deadline (<= 0: one is due), or None."""
    with connection.cursor() as cursor:
        (seconds,) = execute(cursor, "next_deadline", {}).fetchone()
    return None if seconds is None else float(seconds)
