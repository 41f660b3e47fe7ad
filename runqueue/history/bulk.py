"""Bulk requeue and cancel of every run a filter matches, in batches,
through the same service functions as one run (``leases.requeue``,
``leases.cancel``), so each run gets its own transition, epoch bump and
event naming the actor. A run that cannot be acted on (its session busy,
finished meanwhile) is reported and left as it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.apps import apps
from django.db.models import QuerySet

from runqueue import leases
from runqueue.errors import RunqueueError
from runqueue.models import LIVE_STATUSES, PriorityClass, Run, RunStatus
from runqueue.registry import handler
from runqueue.runtime import RunContext

#: Runs per batch: their ids are read, acted on one by one, then reported.
BATCH = 200

VERBS = ("requeue", "cancel")
PAST = {"requeue": "requeued", "cancel": "cancelled"}


def _unknown(verb: str) -> ValueError:
    return ValueError(f"unknown bulk action {verb!r}; one of {', '.join(VERBS)}")


def actionable(queryset: QuerySet[Run], verb: str) -> QuerySet[Run]:
    """The runs of a filter the verb can act on: failed ones for requeue,
    non-terminal ones for cancel."""
    if verb == "requeue":
        return queryset.filter(status=RunStatus.FAILED)
    if verb == "cancel":
        return queryset.filter(status__in=LIVE_STATUSES)
    raise _unknown(verb)


@dataclass(frozen=True)
class BulkAction:
    """What a bulk action does to each run and in whose name: ``verb``
    (requeue or cancel), with the ``actor`` and ``reason`` each run's event
    records."""

    verb: str
    actor: str
    reason: str

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise _unknown(self.verb)

    def on(self, run_id: uuid.UUID) -> Run:
        """The run requeued or cancelled (RunqueueError if it cannot be)."""
        if self.verb == "requeue":
            return leases.requeue(run_id, actor=self.actor, reason=self.reason)
        return leases.cancel(run_id, reason=self.reason, actor=self.actor)

    def history_message(self, how: str) -> str:
        """The admin history's entry for each run changed, e.g. "Requeued
        (bulk) by ops: provider back"; ``how`` goes in the parentheses."""
        done = f"{PAST[self.verb].capitalize()} ({how}) by {self.actor}"
        return done + (f": {self.reason}" if self.reason else "")


@dataclass
class BulkResult:
    """What a bulk action did: runs changed, and runs left with the reason."""

    done: int = 0
    refused: list[tuple[uuid.UUID, RunqueueError]] = field(default_factory=list)


def apply(
    run_ids: Sequence[uuid.UUID],
    action: BulkAction,
    *,
    batch: int = BATCH,
    after_batch: Callable[[list[Run]], None] | None = None,
) -> BulkResult:
    """Requeue or cancel each run, ``batch`` at a time; ``after_batch`` gets
    the runs each batch changed (the admin writes its LogEntries there)."""
    result = BulkResult()
    for start in range(0, len(run_ids), batch):
        done: list[Run] = []
        for run_id in run_ids[start : start + batch]:
            try:
                done.append(action.on(run_id))
            except RunqueueError as exc:
                result.refused.append((run_id, exc))
        result.done += len(done)
        if after_batch is not None and done:
            after_batch(done)
    return result


# --- in the background: a maintenance run -------------------------------------

#: The kind of the maintenance run that acts on many runs (reserved: not over HTTP).
KIND = "runqueue.bulk"
#: Refusals a background run keeps in its checkpoint and result; the rest are counted.
KEEP_REFUSALS = 20


def submit_in_background(
    run_ids: Sequence[uuid.UUID], action: BulkAction, *, user_id: object = None
) -> Run:
    """A maintenance run that acts on ``run_ids`` in batches, checkpointing
    its progress after each: a web request cannot outlive its timeout, a run
    can (and resumes from its last batch if its worker dies). ``user_id``
    names the staff member whose admin history records each change."""
    from runqueue.submission.submit import submit

    payload = {
        "verb": action.verb,
        "ids": [str(run_id) for run_id in run_ids],
        "actor": action.actor,
        "reason": action.reason,
        "user_id": user_id if user_id is None else str(user_id),
    }
    return submit(
        kind=KIND, payload=payload, tenant="runqueue", priority=PriorityClass.MAINTENANCE
    ).run


def _admin_history(user_id: str | None, message: str) -> Callable[[list[Run]], None]:
    def log(runs: list[Run]) -> None:
        if user_id is None or not apps.is_installed("django.contrib.admin"):
            return
        from django.contrib.admin.models import CHANGE, LogEntry

        LogEntry.objects.log_actions(user_id, runs, CHANGE, message)

    return log


@handler(KIND)
def run_in_background(ctx: RunContext) -> dict:
    """Act on the payload's runs a batch at a time; the checkpoint holds the
    position, so a retried attempt goes on from the last batch done."""
    payload = ctx.payload
    ids = [uuid.UUID(run_id) for run_id in payload["ids"]]
    action = BulkAction(payload["verb"], payload["actor"], payload["reason"])
    log = _admin_history(payload.get("user_id"), action.history_message(f"bulk, run {ctx.run.id}"))
    state = ctx.state or {"of": len(ids), "position": 0, "done": 0, "refused": 0, "refusals": []}
    while state["position"] < len(ids):
        chunk = ids[state["position"] : state["position"] + BATCH]
        result = apply(chunk, action, after_batch=log)
        refusals = state["refusals"] + [f"{run_id}: {exc}" for run_id, exc in result.refused]
        state = {
            "of": len(ids),
            "position": state["position"] + len(chunk),
            "done": state["done"] + result.done,
            "refused": state["refused"] + len(result.refused),
            "refusals": refusals[:KEEP_REFUSALS],
        }
        if not ctx.checkpoint(state):
            return state  # the lease is lost: another attempt goes on from here
        ctx.emit("progress", {k: state[k] for k in ("of", "position", "done", "refused")})
    return state
