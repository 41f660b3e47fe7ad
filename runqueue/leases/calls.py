"""A call's record (``ToolInvocation``) as the owning worker writes it,
inside a fenced transaction: a tool call started or awaiting approval, a
step recorded whole (a patch decision, the messages a turn took)."""

from __future__ import annotations

from django.db.models.functions import Now

from runqueue import events
from runqueue.leases.base import Lease, check_json
from runqueue.leases.fence import fenced, renew_params
from runqueue.models import ToolInvocation, ToolStatus
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


#: The event each call record ``record_call`` writes is told by.
_CALL_EVENT: dict[str, str] = {
    ToolStatus.STARTED: events.TOOL_STARTED,
    ToolStatus.AWAITING_APPROVAL: events.TOOL_AWAITING_APPROVAL,
}


def record_call(
    lease: Lease,
    seq: int,
    status: str,
    tool: str,
    idempotency: str,
    arguments: JSON,
    shown: dict[str, JSON],
    **more: JSON,
) -> bool:
    """Call ``seq``'s record (``write_call``) and its event (the seq, the
    tool and ``shown``), in one fenced transaction named ``tool.<status>``:
    a call started, or awaiting approval. False once fenced (nothing written)."""

    def write(_row: tuple) -> None:
        write_call(
            lease,
            seq,
            tool=tool,
            idempotency=idempotency,
            status=status,
            arguments=arguments,
            **more,
        )
        data: dict[str, JSON] = {"seq": seq, "tool": tool, **shown}
        events.append(lease.run_id, _CALL_EVENT[status], lease.epoch, data)

    check_json(arguments, "tool arguments")
    return fenced(lease, f"tool.{status}", "fence_renew", renew_params(lease), write) is not None
