"""A tool call made, and a replayed call checked against its record: the
same tool with the same arguments, the same spawn, the same patch."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runqueue import leases
from runqueue.errors import (
    PermanentError,
)
from runqueue.leases.outcomes import ToolOutcome, positive_seconds
from runqueue.models import (
    ToolInvocation,
    ToolStatus,
)
from runqueue.types import JSON
from runqueue.validation import text_problem


async def acall(fn: Callable[..., Awaitable[JSON]], args: dict[str, JSON], key: str) -> JSON:
    if _accepts_key(fn):
        return await fn(**args, idempotency_key=key)
    return await fn(**args)


def call(fn: Callable[..., JSON], args: dict[str, JSON], key: str) -> JSON:
    if _accepts_key(fn):
        return fn(**args, idempotency_key=key)
    return fn(**args)


def _accepts_key(fn: Callable[..., object]) -> bool:
    try:
        return "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def jsonable(value: JSON) -> JSON:
    """A tool's value as it will be replayed: JSON, with str() for the rest."""
    return json.loads(json.dumps(value, default=str))


#: A model request's step (``runqueue.contrib.steps``) is named this and
#: its model: ``model:openai:gpt-5``.
MODEL_STEP_PREFIX = "model:"
#: The tool name of a patch decision's step (``ctx.patched``).
PATCH_TOOL = "runqueue.patched"
#: The longest patch name (it is stored in the step's arguments).
PATCH_NAME_MAX_LENGTH = 255


def patch_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a patch, or None."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not name or len(name) > PATCH_NAME_MAX_LENGTH:
        return f"must be 1-{PATCH_NAME_MAX_LENGTH} characters, got {len(name)}"
    return text_problem(name)


def is_patch(recorded: ToolInvocation, name: str) -> bool:
    """``recorded`` is the decision to take patch ``name``."""
    arguments = recorded.arguments
    return (
        recorded.tool == PATCH_TOOL
        and isinstance(arguments, dict)
        and arguments.get("name") == name
    )


#: Why a replay that does not match its record is refused.
_SAME_ORDER = "a handler must make its calls in the same order"
_SAME_ARGUMENTS = f"{_SAME_ORDER}, with the same arguments"


def same_tool_call(recorded: ToolInvocation, name: str, args: dict[str, JSON] | None) -> None:
    """PermanentError unless ``recorded`` is this call: the same tool with
    the same arguments (as JSON: key order, tuples and 1 against 1.0 are no
    difference). Every tool record stores its arguments, so records made
    before this check was added are checked the same way."""
    seq = recorded.seq
    if recorded.tool != name:
        raise PermanentError(
            f"tool call #{seq} was {recorded.tool!r} on an earlier attempt and is "
            f"{name!r} now: {_SAME_ORDER}"
        )
    try:
        same = recorded.arguments == json.loads(json.dumps(args or {}, allow_nan=False))
    except (TypeError, ValueError):
        same = False  # not JSON: never what was recorded
    if not same:
        raise PermanentError(
            f"tool call #{seq} was {name!r} with other arguments on an earlier attempt: "
            f"{_SAME_ARGUMENTS}"
        )


def respawned(recorded: ToolInvocation, kind: str, payload: JSON) -> uuid.UUID:
    """The child an earlier attempt's spawn made as this call; PermanentError
    if that call was not this spawn: another tool, another kind, or (when
    the record has its hash: records made before it have the kind only)
    another payload."""
    seq, arguments = recorded.seq, recorded.arguments
    if recorded.tool != leases.SPAWN_TOOL or not isinstance(recorded.result, dict):
        raise PermanentError(
            f"tool call #{seq} was {recorded.tool!r} on an earlier attempt and is a "
            f"spawn of {kind!r} now: {_SAME_ORDER}"
        )
    recorded_kind = arguments.get("kind", kind) if isinstance(arguments, dict) else kind
    if recorded_kind != kind:
        raise PermanentError(
            f"tool call #{seq} was a spawn of {recorded_kind!r} on an earlier attempt and is a "
            f"spawn of {kind!r} now: {_SAME_ORDER}"
        )
    digest = arguments.get(leases.PAYLOAD_DIGEST) if isinstance(arguments, dict) else None
    if digest is not None and digest != leases.payload_digest(payload):
        raise PermanentError(
            f"tool call #{seq} was a spawn of {kind!r} with another payload on an earlier "
            f"attempt: {_SAME_ARGUMENTS}"
        )
    return uuid.UUID(str(recorded.result["run_id"]))


def recorded_outcome(recorded: ToolInvocation) -> ToolOutcome | None:
    """The outcome an earlier attempt (or a person's decision) recorded for
    a call, replayed as is; None for one it started and never finished (the
    caller decides: run it again, mark it uncertain, or stop a replay
    there), or one awaiting approval or approved and not run yet."""
    seq, approval = recorded.seq, recorded.approval
    if recorded.status == ToolStatus.COMPLETED:
        return ToolOutcome(
            status="completed", seq=seq, value=recorded.result, replayed=True, approval=approval
        )
    if recorded.status == ToolStatus.FAILED:
        return ToolOutcome(
            status="failed", seq=seq, error=recorded.error, replayed=True, approval=approval
        )
    if recorded.status == ToolStatus.REJECTED:
        return ToolOutcome(
            status="rejected", seq=seq, error=recorded.error, replayed=True, approval=approval
        )
    if recorded.status == ToolStatus.UNCERTAIN:
        return ToolOutcome(
            status="uncertain",
            seq=seq,
            error=recorded.error,
            replayed=True,
            resolution=recorded.resolution,
            approval=approval,
        )
    return None


@dataclass(frozen=True, slots=True)
class Approval:
    """``invoke_tool``'s ``approval``: whether a call needs a person's
    decision before it runs (always, or as a predicate of its arguments
    says), how long to wait, and what the deadline does."""

    when: bool | Callable[[dict[str, JSON]], object]
    timeout: float | None
    on_timeout: str

    def needed(self, args: dict[str, JSON]) -> bool:
        return bool(self.when(args)) if callable(self.when) else bool(self.when)


def approval_of(
    approval: bool | Callable[[dict[str, JSON]], object] | None,
    timeout: float | dt.timedelta | None,
    on_timeout: str,
) -> Approval | None:
    """The call's approval, checked before anything is numbered or written:
    None when it needs none; ValueError or TypeError for bad input."""
    if on_timeout not in leases.ON_TIMEOUT:
        raise ValueError(f"on_timeout must be one of {leases.ON_TIMEOUT}, got {on_timeout!r}")
    seconds = positive_seconds(timeout)
    if approval is None or approval is False:
        if seconds is not None:
            raise ValueError("approval_timeout is given with approval, and only with it")
        return None
    if approval is not True and not callable(approval):
        raise TypeError(
            f"approval must be True or a callable of the arguments, got {type(approval).__name__}"
        )
    return Approval(approval, seconds, on_timeout)


def approval_time_left(recorded: ToolInvocation, now: dt.datetime) -> float | None:
    """Seconds left before a call awaiting approval meets its deadline
    (``approval_timeout`` from when it was first asked), <= 0 once it has;
    None without one. Counted from the record, never from the run's last
    wait: a worker lost between the record and the wait, or a wait that
    ended for another reason, neither moves the deadline nor passes it."""
    timeout = (recorded.approval or {}).get("timeout")
    if not isinstance(timeout, int | float):
        return None
    return timeout - (now - recorded.created_at).total_seconds()


def approved_arguments(recorded: ToolInvocation, args: dict[str, JSON]) -> dict[str, JSON]:
    """The arguments an approved call runs with: the edited ones, if the
    decision edited them, else those the handler passed."""
    decided = (recorded.approval or {}).get("decided")
    if isinstance(decided, dict) and isinstance(decided.get("arguments"), dict):
        return decided["arguments"]
    return args
