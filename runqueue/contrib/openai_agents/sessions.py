"""The run's session as the SDK's conversation (``RunqueueSession``): each
change a step of the run, the items read back from the steps of the
session's runs; a run with a ``session_id`` uses it by default."""

from __future__ import annotations

from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session import SessionABC

from runqueue.contrib import on_loop, steps
from runqueue.contrib.openai_agents.durable import jsonable
from runqueue.leases import payload_digest
from runqueue.models import Idempotency, Run, RunStatus, ToolInvocation, ToolStatus
from runqueue.runtime import aio
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.runtime.context import RunContext
from runqueue.types import JSON

#: The tool name of a step that records items added to the run's session.
SESSION_STEP = "openai_agents.session"


class RunqueueSession(SessionABC):
    """The run's ``session_id`` as the SDK's conversation memory, without a
    table of its own: each ``add_items`` is a step of the run (tool
    ``openai_agents.session``, its result the items), so a replay writes
    nothing twice and a fenced worker nothing at all; ``get_items`` reads
    the steps of the session's earlier runs, in the order they were
    written, and this run's steps before the current one (what a replay
    reads is what the first attempt read). A run the session rolled back
    (``on_busy="rollback"``) is not part of it."""

    def __init__(self, ctx: RunContext | AsyncRunContext, session_id: str | None = None) -> None:
        self.ctx = on_loop.as_async(ctx)
        self.session_id = session_id or self.ctx.run.session_id or ""
        if not self.session_id:
            raise ValueError("RunqueueSession needs a session_id: the run has none")

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        items = await aio.db(_session_items, self.ctx.run, self.session_id, self.ctx.sync._seq)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._record({"op": "add", "items": jsonable(items)})

    async def pop_item(self) -> TResponseInputItem | None:
        items = await self.get_items()
        if not items:
            return None
        await self._record({"op": "pop"})
        return items[-1]

    async def clear_session(self) -> None:
        await self._record({"op": "clear"})

    async def _record(self, entry: dict[str, JSON]) -> None:
        outcome = await self.ctx.invoke_tool(
            SESSION_STEP,
            lambda **_step: entry,
            args={"op": entry["op"], "sha256": payload_digest(entry)},
            idempotency=Idempotency.IDEMPOTENT,
        )
        if outcome.status == "fenced":
            raise steps.fenced(self.ctx)
        if outcome.status != "completed":
            raise RuntimeError(
                f"session step #{outcome.seq} ended {outcome.status}: {outcome.error}"
            )


def _session_items(run: Run, session_id: str, before_seq: int) -> list[Any]:
    """The session's items: every session step of its other runs (except
    rolled-back ones) and of this one before ``before_seq``, folded in the
    order they were written (one run of a session is active at a time)."""
    from django.db.models import Q

    rolled_back = Run.objects.filter(
        tenant=run.tenant,
        session_id=session_id,
        status=RunStatus.CANCELLED,
        failure__reason="rolled_back",
    ).values("id")
    records = (
        ToolInvocation.objects.filter(
            run__tenant=run.tenant,
            run__session_id=session_id,
            tool=SESSION_STEP,
            status=ToolStatus.COMPLETED,
        )
        .filter(~Q(run_id=run.id) | Q(seq__lt=before_seq))
        .exclude(run_id__in=rolled_back)
        .order_by("created_at", "run_id", "seq")
        .values_list("result", flat=True)
    )
    items: list[Any] = []
    for entry in records:
        if not isinstance(entry, dict):
            continue
        if entry.get("op") == "add" and isinstance(entry.get("items"), list):
            items.extend(entry["items"])
        elif entry.get("op") == "pop" and items:
            items.pop()
        elif entry.get("op") == "clear":
            items.clear()
    return items


def default_session(ctx: AsyncRunContext, session: Any) -> Any:
    """``Runner``'s ``session``: the default ``"run"`` is the run's own
    session as a ``RunqueueSession`` (none for a run without one); any
    other value is the caller's."""
    if isinstance(session, str) and session == "run":
        session_id = ctx.run.session_id
        return RunqueueSession(ctx) if session_id else None
    return session
