"""A turn's messages: how the queue records them, and the session's line as
its running turn reads it.

The run's ``turn`` column holds the payloads ``on_busy="merge"`` (or
``"debounce"``) joined into one run, whether a pending turn is a steer for
the running one, and what ``"latest"`` replaced (NULL for a run that is one
message, as most are); the payload stays the first message's, so a client
payload shaped like a merge (``{"merged": [...]}``) is never read as one.

The line: when the turn asks the user and messages are waiting, the first
one is the answer; and the messages sent to steer it (``on_busy="steer"``)
are taken by ``ctx.steers()`` (docs/decisions/sessions.md, "Busy sessions:
on_busy").

Both run inside the running turn's fenced transaction, under its row lock,
which every writer of the session's line takes first: so the line is read
in order and a message is taken once. A message taken ends its pending
turn as cancelled, reason ``answered`` or ``steered``, naming the run that
took it, so whoever sent it can see where it went.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from runqueue import events
from runqueue.leases.base import Lease
from runqueue.leases.calls import write_call
from runqueue.leases.fence import fenced, renew_params
from runqueue.leases.transitions import cancel_in_transaction
from runqueue.leases.waits import deliver_locked
from runqueue.models import Idempotency, Run, RunStatus, ToolStatus
from runqueue.types import JSON

#: ``turn["payloads"]``: every message of a joined turn, oldest first.
PAYLOADS = "payloads"
#: ``turn["steer"]``: a pending turn sent with ``on_busy="steer"``: the
#: running turn may read it (``ctx.steers()``); if it does not, it runs
#: as the session's next turn.
STEER = "steer"


def turn_payloads(run: Any) -> list[JSON]:
    """The payloads of the submits a run answers, in order: the messages
    joined into it, or its own payload alone. ``run``: a ``Run`` (or
    anything with ``payload`` and ``turn``)."""
    turn = getattr(run, "turn", None)
    if isinstance(turn, dict) and isinstance(turn.get(PAYLOADS), list):
        return list(turn[PAYLOADS])
    return [run.payload]


def joined(run: Any, then: JSON) -> dict[str, JSON]:
    """``run``'s turn with the message ``then`` joined at its end."""
    turn = dict(run.turn) if isinstance(run.turn, dict) else {}
    turn[PAYLOADS] = [*turn_payloads(run), then]
    return turn


def is_steer(run: Any) -> bool:
    turn = getattr(run, "turn", None)
    return isinstance(turn, dict) and bool(turn.get(STEER))


#: The tool name of a ``ctx.steers()`` step that took messages.
STEERS_TOOL = "runqueue.steers"


def _line(run: Run) -> QuerySet[Run]:
    return Run.objects.filter(
        tenant=run.tenant, session_id=run.session_id, status=RunStatus.PENDING
    ).order_by("place")


def answer_from_line(lease: Lease) -> bool:
    """In the transaction that makes the run wait for the user (its lock
    held): if its session has messages waiting, the first one is the
    answer, delivered at once (the run queued again with it as its input);
    a turn of several joined messages gives its first and keeps the rest.
    True if it did."""
    run = lease.run
    if run.session_id is None:
        return False
    line = _line(run)
    pending = line.select_for_update(no_key=True, skip_locked=True).first()
    if pending is None:
        return False
    messages = turn_payloads(pending)
    deliver_locked(run.id, run.priority, messages[0])
    rest = messages[1:]
    if not rest:
        cancel_in_transaction(
            pending.id, reason="answered", actor="runqueue", data={"to": str(run.id)}
        )
        return True
    turn = dict(pending.turn or {})
    if len(rest) > 1:
        turn[PAYLOADS] = rest
    else:
        turn.pop(PAYLOADS, None)
    Run.objects.filter(id=pending.id).update(payload=rest[0], turn=turn or None)
    events.append(
        pending.id, events.ANSWERED, pending.lease_epoch, {"to": str(run.id), "messages": 1}
    )
    return True


def has_steers(run: Run) -> bool:
    """A cheap look, without a lock: messages to steer the session's turn wait."""
    if run.session_id is None:
        return False
    return _line(run).filter(turn__contains={STEER: True}).exists()


def take_steers(lease: Lease, seq: int) -> list[JSON] | None:
    """Take every message sent to steer the run's session, in the order
    sent, as step ``seq`` of the run (its record is what a retry replays);
    their pending turns end, reason ``steered``. The messages (none: no
    step is recorded); None once fenced."""
    taken: list[JSON] = []

    def write(_row: tuple) -> None:
        taken.clear()  # a transaction run again (a deadlock) starts afresh
        steers = list(
            _line(lease.run)
            .filter(turn__contains={STEER: True})
            .select_for_update(no_key=True, skip_locked=True)
        )
        for pending in steers:
            taken.extend(turn_payloads(pending))
            cancel_in_transaction(
                pending.id, reason="steered", actor="runqueue", data={"into": str(lease.run_id)}
            )
        if not taken:
            return
        result = {"payloads": list(taken), "runs": [str(p.id) for p in steers]}
        write_call(
            lease,
            seq,
            tool=STEERS_TOOL,
            idempotency=Idempotency.IDEMPOTENT,
            status=ToolStatus.COMPLETED,
            arguments={},
            result=result,
            finished=True,
        )
        events.append(
            lease.run_id, events.TOOL_COMPLETED, lease.epoch, {"seq": seq, "tool": STEERS_TOOL}
        )

    if fenced(lease, "steers", "fence_renew", renew_params(lease), write) is None:
        return None
    return taken
