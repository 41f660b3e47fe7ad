"""A handler's saved state: the next checkpoint of a run, written inside
the caller's fenced transaction (a checkpoint, a wait's end of turn)."""

from __future__ import annotations

import uuid

from django.db.models import Max

from runqueue import events
from runqueue.leases.base import Lease
from runqueue.models import Checkpoint
from runqueue.types import JSON


def _next_checkpoint_seq(run_id: uuid.UUID) -> int:
    last = Checkpoint.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"]
    return 0 if last is None else last + 1


def save_checkpoint(lease: Lease, state: JSON, tool_seq: int, *, turn_end: bool = False) -> None:
    """``turn_end``: saved by the end of a turn (a wait), not inside one."""
    seq = _next_checkpoint_seq(lease.run_id)
    Checkpoint.objects.create(
        run_id=lease.run_id,
        seq=seq,
        state=state,
        tool_seq=tool_seq,
        lease_epoch=lease.epoch,
        turn_end=turn_end,
    )
    events.append(lease.run_id, events.CHECKPOINTED, lease.epoch, {"seq": seq})
