"""What the run a turn interrupted had done (``ctx.interrupted``,
``on_busy="interrupt"``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from types import SimpleNamespace

from runqueue import events
from runqueue.leases.turns import turn_payloads
from runqueue.models import (
    Checkpoint,
    EventLog,
    Run,
    ToolInvocation,
    ToolStatus,
)
from runqueue.types import JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedTool:
    """A tool call (or spawn) an interrupted run finished: how it ended
    (completed, failed, or uncertain: it may or may not have happened)."""

    seq: int
    tool: str
    status: str
    arguments: JSON
    result: JSON
    error: JSON


#: A ``FinishedTool``'s fields: the ``ToolInvocation`` columns of the same names.
_FINISHED_TOOL_FIELDS = tuple(f.name for f in fields(FinishedTool))


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    """What the run this one interrupted (``on_busy="interrupt"``) had done
    when it was cancelled, as ``ctx.interrupted`` shows it: its id and
    payload, its last checkpoint's state, the tool calls it finished, and
    the text it streamed in its last attempt (as far as it was made
    durable). Nothing the old turn finished runs again unless the handler
    does it again (docs/decisions/sessions.md, "Busy sessions: on_busy")."""

    run_id: uuid.UUID
    payload: JSON
    state: JSON
    tools: tuple[FinishedTool, ...]
    text: str
    #: The messages of that turn, in order (several when a merge joined them).
    payloads: tuple[JSON, ...] = ()
    #: When that turn was interrupted before it ever started, the turn it
    #: had interrupted in turn (and so on): a chain of interrupts loses no
    #: message and no finished tool call. None otherwise.
    earlier: Interrupted | None = None

    def chain(self) -> list[Interrupted]:
        """Every turn this one stands for, oldest first: the earliest that
        ran, then each that was interrupted before it started."""
        found: list[Interrupted] = []
        link: Interrupted | None = self
        while link is not None:
            found.append(link)
            link = link.earlier
        return found[::-1]


#: How far back a chain of turns interrupted before they started is followed.
CHAIN_MAX = 50


def interrupted_of(run_id: uuid.UUID, depth: int = 0) -> Interrupted | None:
    """What run ``run_id`` had done (``Interrupted``), or None if it is gone;
    if it never started and had interrupted a run itself, that run too
    (``earlier``)."""
    run = (
        Run.objects.filter(id=run_id)
        .values("payload", "turn", "started_at", "interrupted_id")
        .first()
    )
    if run is None:
        return None
    earlier = None
    if run["started_at"] is None and run["interrupted_id"] and depth < CHAIN_MAX:
        earlier = interrupted_of(run["interrupted_id"], depth + 1)
    last = Checkpoint.objects.filter(run_id=run_id).order_by("-seq").first()
    tools = tuple(
        FinishedTool(**row)
        for row in ToolInvocation.objects.filter(run_id=run_id)
        .exclude(status=ToolStatus.STARTED)
        .order_by("seq")
        .values(*_FINISHED_TOOL_FIELDS)
    )
    messages = SimpleNamespace(payload=run["payload"], turn=run["turn"])
    return Interrupted(
        run_id=run_id,
        payload=run["payload"],
        state=last.state if last else None,
        tools=tools,
        text=_last_attempt_text(run_id),
        payloads=tuple(turn_payloads(messages)),
        earlier=earlier,
    )


def _last_attempt_text(run_id: uuid.UUID) -> str:
    """The durable text (``run.text`` chunks) of the run's last attempt:
    each chunk where its offset puts it, a chunk seen twice written once."""
    logged = EventLog.objects.filter(run_id=run_id)
    claimed = (
        logged.filter(type=events.CLAIMED).order_by("-id").values_list("id", flat=True).first()
    )
    chunks = logged.filter(type=events.TEXT, id__gt=claimed or 0).order_by("id")
    text = ""
    for data in chunks.values_list("data", flat=True):
        offset, piece = int(data.get("offset", 0)), str(data.get("text", ""))
        text = text[:offset] + piece if offset <= len(text) else text
    return text
