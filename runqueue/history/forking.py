"""``runqueue.fork``: a finished run forked from one of its steps, with
the caller's trace (the work is in ``runqueue.leases.forks``; docs/
decisions/run-trees.md, "Forking a run")."""

from __future__ import annotations

import uuid

from runqueue import leases
from runqueue.models import Run
from runqueue.observability import tracing
from runqueue.types import JSON


def fork(
    run_id: uuid.UUID | str,
    *,
    from_step: int,
    payload: JSON = None,
    actor: str,
    reason: str,
) -> Run:
    """A new run of finished run ``run_id``'s kind, tenant, principal,
    priority and concurrency key, holding no session slot, whose first
    ``from_step`` recorded steps (tool outcomes and spawns, in call order)
    are copied so its handler replays them without running them again;
    ``payload`` replaces the original's (None: the same). ``run.forked`` on
    both runs names ``actor`` and ``reason``. Returns the fork.

    Raises InvalidArgument, RunNotFound, InvalidTransition (the run is not
    finished), UnknownKind or ForkRefused (a step to copy has an outcome
    nobody knows, or spawned a child still live); nothing is written then.
    """
    return leases.fork(
        run_id,
        from_step=from_step,
        payload=payload,
        actor=actor,
        reason=reason,
        traceparent=tracing.current_traceparent(),
    )


def fork_from_failure(run_id: uuid.UUID | str, *, actor: str, reason: str) -> Run:
    """``fork`` of a dead-lettered run from where it failed: the steps
    before its last failed tool call kept (that call runs again), or every
    step it recorded when none failed (``leases.failure_cut``)."""
    return leases.fork_from_failure(
        run_id, actor=actor, reason=reason, traceparent=tracing.current_traceparent()
    )


def failure_cut(run_id: uuid.UUID) -> tuple[int, int | None]:
    """What ``fork_from_failure`` would keep: (steps kept, the failed call
    it runs again or None), for a confirmation page."""
    return leases.failure_cut(run_id)
