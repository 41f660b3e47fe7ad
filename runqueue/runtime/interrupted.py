"""What the run a turn interrupted had done (``ctx.interrupted``,
``on_busy="interrupt"``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from runqueue import events
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    """What the run this one interrupted (``on_busy="interrupt"``) had done
    when it was cancelled, as ``ctx.interrupted`` shows it: its id and
    payload, its last checkpoint's state, the tool calls it finished, and
    the text it streamed in its last attempt (as far as it was made
    durable). Nothing the old turn finished runs again unless the handler
    does it again (docs/decisions.md, "Busy sessions: on_busy")."""

    run_id: uuid.UUID
    payload: JSON
    state: JSON
    tools: tuple[FinishedTool, ...]
    text: str


def interrupted_of(run_id: uuid.UUID) -> Interrupted | None:
    """What run ``run_id`` had done (``Interrupted``), or None if it is gone."""
    run = Run.objects.filter(id=run_id).values("payload").first()
    if run is None:
        return None
    last = Checkpoint.objects.filter(run_id=run_id).order_by("-seq").first()
    tools = tuple(
        FinishedTool(
            seq=t.seq,
            tool=t.tool,
            status=t.status,
            arguments=t.arguments,
            result=t.result,
            error=t.error,
        )
        for t in ToolInvocation.objects.filter(run_id=run_id)
        .exclude(status=ToolStatus.STARTED)
        .order_by("seq")
    )
    return Interrupted(
        run_id=run_id,
        payload=run["payload"],
        state=last.state if last else None,
        tools=tools,
        text=_last_attempt_text(run_id),
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
