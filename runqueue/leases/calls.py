"""A call's record (``ToolInvocation``) as the owning worker writes it,
inside a fenced transaction: a tool call started or awaiting approval, a
step recorded whole (a patch decision, the messages a turn took)."""

from __future__ import annotations

from django.db.models.functions import Now

from runqueue.leases.base import Lease
from runqueue.models import ToolInvocation
from runqueue.types import JSON


def write_call(
    lease: Lease,
    seq: int,
    *,
    tool: str,
    idempotency: str,
    status: str,
    arguments: JSON,
    result: JSON = None,
    finished: bool = False,
    **more: JSON,
) -> None:
    """Call ``seq``'s record, made or made again by this lease (the caller
    holds its fence); ``more``: other columns (an approval's)."""
    ToolInvocation.objects.update_or_create(
        run_id=lease.run_id,
        seq=seq,
        defaults={
            "tool": tool,
            "idempotency": idempotency,
            "status": status,
            "arguments": arguments,
            "result": result,
            "error": None,
            "lease_epoch": lease.epoch,
            "lease_token": lease.token,
            "finished_at": Now() if finished else None,
            **more,
        },
    )
