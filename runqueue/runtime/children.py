"""A handler's children: the ``RunContext`` part that spawns child runs
(recorded in order like a tool call, through the fence), reads them back in
spawn order, and ends the turn until every one is terminal (the fan-in)."""

from __future__ import annotations

import uuid

from runqueue import leases
from runqueue.errors import ChildrenGone
from runqueue.models import Run, ToolInvocation, WaitReason
from runqueue.runtime.context_base import ContextBase
from runqueue.runtime.returns import Wait
from runqueue.runtime.tools import respawned
from runqueue.submission import spawning
from runqueue.types import JSON


class Children(ContextBase):
    """``spawn``, ``children`` and ``wait_for_children``."""

    def spawn(
        self,
        kind: str,
        payload: JSON = None,
        *,
        priority: int | None = None,
        concurrency_key: str | None = None,
        session_id: str | None = None,
    ) -> uuid.UUID:
        """Create a child run; its id. Recorded in order like a tool call,
        through the fence: a handler run again gets the same child back and
        never makes a second; a fenced handler makes none (RunCancelled)."""
        self.check()
        seq, recorded = self._number()
        if recorded is not None:
            return respawned(recorded, kind, payload)
        child = spawning.spawn(
            self.lease,
            seq,
            kind=kind,
            payload=payload,
            priority=priority,
            concurrency_key=concurrency_key,
            session_id=session_id,
        )
        if child is None:
            raise self._lost()
        return child

    def children(self) -> list[Run]:
        """The runs this run spawned, in spawn order, as they are now: every
        one of them, or ChildrenGone naming those that cannot be found
        (retention keeps a run while an ancestor is live, so only a delete
        does that): a fan-in never goes on with part of its children."""
        records = ToolInvocation.objects.filter(
            run_id=self.run.id, tool=leases.SPAWN_TOOL
        ).order_by("seq")
        results = records.values_list("result", flat=True)
        ids = [uuid.UUID(str(r["run_id"])) for r in results if isinstance(r, dict)]
        runs = Run.objects.in_bulk(ids)
        if missing := [i for i in ids if i not in runs]:
            raise ChildrenGone(self.run.id, missing, len(ids))
        return [runs[i] for i in ids]

    def wait_for_children(self, state: JSON = None) -> Wait:
        """Return this from the handler to end the turn until every child
        it spawned is terminal; it resumes once, ``ctx.children()`` then
        gives them. No child open: it resumes at once."""
        self.check()
        return Wait(reason=WaitReason.CHILDREN, state=self._state(state))
