"""Event type names, the append helper, and an event's public body.

Every state change appends its event in the same transaction as the change,
so the log alone can rebuild a run's history; a plain creation, a claim and
a success are held by the run's row instead, and ``EventLog`` (what readers
read) shows them (docs/decisions/queue.md, "Claim and success on the run's row").
``append`` never opens a transaction of its own: it runs inside the caller's.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import TypedDict

from runqueue.models import EventLog, QueueEvent, RunEvent
from runqueue.types import JSON

CREATED = "run.created"
CLAIMED = "run.claimed"
CHECKPOINTED = "run.checkpointed"
TOOL_STARTED = "tool.started"
TOOL_COMPLETED = "tool.completed"
TOOL_FAILED = "tool.failed"
TOOL_UNCERTAIN = "tool.uncertain"
TOOL_RESOLVED = "tool.resolved"
#: A call was recorded awaiting a person's approval (data: seq, tool, timeout).
TOOL_AWAITING_APPROVAL = "tool.awaiting_approval"
#: A call awaiting approval was decided (data: seq, tool, decision, actor, reason).
TOOL_DECIDED = "tool.decided"
WAITING = "run.waiting"
INPUT_DELIVERED = "run.input_delivered"
REQUEUED = "run.requeued"
FENCED = "run.fenced"
SUCCEEDED = "run.succeeded"
FAILED = "run.failed"
CANCELLED = "run.cancelled"
OPERATOR_REQUEUED = "run.operator_requeued"
#: A durable chunk of the text a turn streamed (``ctx.stream``); data:
#: {"offset": characters of the turn's text before it, "text": ...}.
TEXT = "run.text"
#: A handler's model calls on a budget (ctx.reserve, ctx.settle).
BUDGET_RESERVED = "budget.reserved"
BUDGET_SETTLED = "budget.settled"
#: The claim's reservation given back with a run its handler never started
#: (data: key, tokens): the call was never made.
BUDGET_REFUNDED = "budget.refunded"
#: A child run was created by this run (data: seq, child, kind).
SPAWNED = "run.spawned"
#: The turn ended waiting for children, a signal or a time (data: reason,
#: name, until).
SUSPENDED = "run.suspended"
#: A waiting run was queued again (data: reason; timed_out on a deadline).
RESUMED = "run.resumed"
#: A signal was sent to a run that did not wait for it: kept in its mailbox.
SIGNAL_KEPT = "run.signal_kept"
#: A pending turn's first message was the answer to its session's run
#: that asked the user (data: to, messages); the rest stay in line.
#: ``on_busy="latest"`` replaced a turn's messages (data: replaced, by).
SUPERSEDED = "run.superseded"
ANSWERED = "run.answered"
#: A pending turn was queued: its session's active run ended (data: place;
#: runqueue_promote, fn_sessions.sql).
PROMOTED = "run.promoted"
#: A submit's payload joined this turn not started yet (``on_busy="merge"``;
#: data: turns, how many payloads it holds now).
MERGED = "run.merged"
#: A fork was made (on the fork: forked_from, from_step, ...; on the
#: original: fork, from_step, ...; the statement fork_run writes both).
FORKED = "run.forked"
#: The run was paused, or resumed from a pause (runqueue.capacity.pausing.pause_run;
#: data: actor, reason, tree_from; resumed: paused_seconds).
PAUSED = "run.paused"
UNPAUSED = "run.unpaused"
#: A schedule made this run (data: schedule, tick_at; or run_now and actor).
SCHEDULE_FIRED = "schedule.fired"

# Queue events: about the queue, not one run (QueueEvent, not RunEvent).
KIND_PAUSED = "kind.paused"
KIND_RESUMED = "kind.resumed"
SCHEDULE_PAUSED = "schedule.paused"
SCHEDULE_RESUMED = "schedule.resumed"
SCHEDULE_RUN_NOW = "schedule.run_now"
#: A schedule made over the API or by a handler, and one deleted over the API.
SCHEDULE_CREATED = "schedule.created"
SCHEDULE_DELETED = "schedule.deleted"

#: Events that move a run's status, and the status each moves it to.
#: ``run.requeued`` and ``run.operator_requeued`` move it back to queued.
STATUS_OF: dict[str, str] = {
    CREATED: "queued",
    CLAIMED: "running",
    WAITING: "waiting_for_user",
    SUSPENDED: "waiting",
    RESUMED: "queued",
    INPUT_DELIVERED: "queued",
    REQUEUED: "queued",
    OPERATOR_REQUEUED: "queued",
    SUCCEEDED: "succeeded",
    FAILED: "failed",
    CANCELLED: "cancelled",
}


def append(
    run_id: uuid.UUID | str,
    type_: str,
    lease_epoch: int,
    data: Mapping[str, JSON] | None = None,
    *,
    at: dt.datetime | None = None,
) -> None:
    """Append one event inside the caller's transaction; ``at``: the
    database instant it records (default: its statement's), for an event
    that must carry the instant of what it records (a budget reservation)."""
    extra = {} if at is None else {"created_at": at}
    RunEvent.objects.create(
        run_id=run_id,
        type=type_,
        lease_epoch=lease_epoch,
        data=dict(data) if data else {},
        **extra,
    )


def record(type_: str, subject: str, data: dict[str, JSON] | None = None) -> QueueEvent:
    """Append a queue event (a kind paused, a schedule resumed) inside the
    caller's transaction."""
    return QueueEvent.objects.create(type=type_, subject=subject, data=data or {})


# -- An event as the HTTP API and the event stream show it --------------------


class EventBody(TypedDict):
    id: int
    type: str
    lease_epoch: int
    data: JSON
    created_at: str | None


def public_time(value: dt.datetime | None) -> str | None:
    """A time as the API and the stream show it: ISO 8601 in UTC."""
    return value.astimezone(dt.UTC).isoformat() if value is not None else None


#: The members of an event's data that name a lease's internals, by event
#: type: the fencing token and the worker's owner string (its host and pid).
#: They are for operators; a tenant's API client reads the attempt instead.
LEASE_INTERNALS: dict[str, tuple[str, ...]] = {
    CLAIMED: ("owner", "token"),
    FENCED: ("owner", "token"),
}


def event_body(event: RunEvent | EventLog, *, operator: bool = False) -> EventBody:
    """An event's public JSON (the API's events page, the stream's data):
    its data without tracebacks, which stay in the database and the admin,
    and, unless ``operator`` (a staff session), without the lease's token
    and its worker's owner string (``LEASE_INTERNALS``)."""
    data = without_tracebacks(event.data)
    hidden = () if operator else LEASE_INTERNALS.get(event.type, ())
    if hidden and isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in hidden}
    return {
        "id": event.id,
        "type": event.type,
        "lease_epoch": event.lease_epoch,
        "data": data,
        "created_at": public_time(event.created_at),
    }


def without_tracebacks(value: JSON) -> JSON:
    """``value`` with every ``traceback`` member removed, at any depth."""
    if isinstance(value, dict):
        return {k: without_tracebacks(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, list):
        return [without_tracebacks(v) for v in value]
    return value
