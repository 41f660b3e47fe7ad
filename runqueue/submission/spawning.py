"""``ctx.spawn``'s child: what it may be (``submit``'s rules, its parent's
tenant and principal), its default priority, and its creation with the
caller's trace (the fenced write and its tool record are in
``runqueue.leases``; docs/decisions/run-trees.md, "Spawn: through the fence, in
the tool-call order")."""

from __future__ import annotations

import uuid

from runqueue import leases
from runqueue.models import PriorityClass
from runqueue.observability import tracing
from runqueue.submission.rules import check_submission, require
from runqueue.types import JSON


def child_priority(parent_priority: int) -> int:
    """A child's default priority: its parent's, but never more urgent than
    the async class. An interactive run's sub-agents are background work of
    its turn: on the async slots, under the async cap of the parent's key,
    they neither run one by one under the interactive cap their waiting
    parent gave up nor hold the tenant's next turn behind them
    (docs/decisions/run-trees.md, "Children run as async work")."""
    return max(parent_priority, PriorityClass.ASYNC.value)


def spawn(
    lease: leases.Lease,
    seq: int,
    *,
    kind: str,
    payload: JSON = None,
    priority: int | None = None,
    concurrency_key: str | None = None,
    session_id: str | None = None,
) -> uuid.UUID | None:
    """Create a child of the leased run, recorded as its tool call ``seq``:
    the child's id, or None if the parent's lease is lost (nothing written).

    The child follows ``submit``'s rules (its kind registered, its payload
    checked; InvalidSubmission or UnknownKind before anything is written)
    and is the parent's tenant and principal; its concurrency key is the
    parent's and its priority ``child_priority(parent)`` unless given. With
    a ``session_id`` it is that session's active run (ActiveRunConflict if
    the session has one); without one it holds no session slot, so its
    parent keeps its own.
    """
    parent = lease.run
    request = require(
        check_submission(
            kind=kind,
            payload=payload,
            session_id=session_id,
            tenant=parent.tenant,
            principal=parent.principal,
            priority=child_priority(parent.priority) if priority is None else priority,
            concurrency_key=parent.concurrency_key if concurrency_key is None else concurrency_key,
        )
    )
    child = leases.spawn(lease, seq, request, traceparent=tracing.current_traceparent())
    return None if child is None else child.id
