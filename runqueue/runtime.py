"""The handler runtime: the RunContext a handler gets, and running a lease.

A handler is ``fn(ctx) -> result``. It resumes from its last checkpoint
(``ctx.state``); tool invocations recorded by an earlier attempt are replayed
from their records instead of running again, and the one left ``started`` is
decided by its idempotency class: an idempotent tool runs again, a
non-idempotent one becomes ``uncertain`` and the handler is told so.
Once the lease is lost, nothing more is written or run for this attempt.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from django.db import InterfaceError, OperationalError
from django.utils.module_loading import import_string

from runqueue import leases, observe, registry
from runqueue.conf import get_settings
from runqueue.errors import PERMANENT, PermanentError, UncertainOutcome, UnknownKind, classify
from runqueue.failures import failure_record, permanent_failure
from runqueue.models import Checkpoint, Idempotency, Run, ToolInvocation, ToolStatus
from runqueue.outcomes import (
    Failed,
    GaveUp,
    Outcome,
    Succeeded,
    ToolOutcome,
    Waiting,
)
from runqueue.stream.emit import emit as stream_emit
from runqueue.types import JSON

logger = logging.getLogger("runqueue.runtime")


@dataclass(frozen=True, slots=True)
class AskUser:
    """Returned by a handler (via ``ctx.ask_user``) to end the turn waiting for input."""

    question: JSON
    state: JSON


class RunContext:
    """What a handler sees of its run, and the only way it writes."""

    def __init__(
        self,
        lease: leases.Lease,
        *,
        state: JSON,
        tool_seq: int,
        recorded: dict[int, ToolInvocation],
    ) -> None:
        self.lease = lease
        self.state = state
        self._seq = tool_seq
        self._recorded = recorded

    @property
    def run(self) -> Run:
        return self.lease.run

    @property
    def payload(self) -> JSON:
        return self.lease.run.payload

    @property
    def input(self) -> JSON:
        """Input delivered by the user on resume, or None."""
        return self.lease.run.input

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    @property
    def fenced(self) -> bool:
        """True once another worker owns the run: stop, nothing more is written."""
        return self.lease.fenced

    def heartbeat(self) -> bool:
        return leases.heartbeat(self.lease)

    def checkpoint(self, state: JSON) -> bool:
        """Save ``state``; a later attempt resumes with it as ``ctx.state``."""
        ok = leases.checkpoint(self.lease, state, tool_seq=self._seq)
        if ok:
            self.state = state
        return ok

    def emit(self, event_type: str, data: dict[str, JSON] | None = None) -> bool:
        """Publish a progress event to the run's stream (through the fence);
        False once fenced. ValueError for a reserved type or oversized data."""
        return stream_emit(self.lease, event_type, data)

    def ask_user(self, question: JSON, state: JSON = None) -> AskUser:
        """Return this from the handler to wait for the user's answer."""
        return AskUser(question=question, state=self.state if state is None else state)

    def idempotency_key(self, seq: int) -> str:
        """A key for tool call ``seq`` that stays the same on every attempt."""
        return f"{self.run.id}:{seq}"

    def invoke_tool(
        self,
        name: str,
        fn: Callable[..., JSON],
        *,
        args: dict[str, JSON] | None = None,
        idempotency: str = Idempotency.NON_IDEMPOTENT,
    ) -> ToolOutcome:
        """Run a side effect at most once per record; see the module docstring."""
        with observe.tool(self.lease, name, idempotency) as traced:  # span, metrics
            outcome = self._invoke_tool(name, fn, args, Idempotency(idempotency))
            traced.done(outcome)
        return outcome

    def _invoke_tool(
        self, name: str, fn: Callable[..., JSON], args: dict[str, JSON] | None, idempotency: str
    ) -> ToolOutcome:
        seq = self._seq
        self._seq += 1
        if self.fenced:
            return ToolOutcome(status="fenced", seq=seq)
        recorded = self._recorded.pop(seq, None)
        if recorded is not None:
            if recorded.tool != name:
                raise PermanentError(
                    f"tool call #{seq} was {recorded.tool!r} on an earlier attempt and is "
                    f"{name!r} now: a handler must make its tool calls in the same order"
                )
            replay = self._replay(recorded)
            if replay is not None:
                return replay
        args = args or {}
        if not leases.record_tool_started(
            self.lease, seq=seq, tool=name, idempotency=idempotency, arguments=args
        ):
            return ToolOutcome(status="fenced", seq=seq)
        try:
            value = _call(fn, args, self.idempotency_key(seq))
        except UncertainOutcome as exc:
            error = {"type": type(exc).__name__, "message": str(exc)}
            leases.record_tool_outcome(
                self.lease, seq=seq, status=ToolStatus.UNCERTAIN, error=error
            )
            return ToolOutcome(status="uncertain", seq=seq, error=error)
        except Exception as exc:  # noqa: BLE001 - a tool's failure is the handler's to handle
            error = {"type": type(exc).__name__, "message": str(exc)}
            leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.FAILED, error=error)
            return ToolOutcome(status="failed", seq=seq, error=error)
        value = _jsonable(value)
        leases.record_tool_outcome(self.lease, seq=seq, status=ToolStatus.COMPLETED, result=value)
        return ToolOutcome(status="completed", seq=seq, value=value)

    def _replay(self, recorded: ToolInvocation) -> ToolOutcome | None:
        """The outcome recorded by an earlier attempt, or None to run again."""
        seq = recorded.seq
        if recorded.status == ToolStatus.COMPLETED:
            return ToolOutcome(status="completed", seq=seq, value=recorded.result, replayed=True)
        if recorded.status == ToolStatus.FAILED:
            return ToolOutcome(status="failed", seq=seq, error=recorded.error, replayed=True)
        if recorded.status == ToolStatus.UNCERTAIN:
            return ToolOutcome(
                status="uncertain",
                seq=seq,
                error=recorded.error,
                replayed=True,
                resolution=recorded.resolution,
            )
        if recorded.idempotency == Idempotency.IDEMPOTENT:
            return None  # started, outcome unknown, safe to run again
        error = {
            "type": "UncertainOutcome",
            "message": f"{recorded.tool} started on epoch {recorded.lease_epoch} and its "
            "worker was lost before recording the outcome: it may or may not have happened",
        }
        if not leases.record_tool_outcome(
            self.lease, seq=seq, status=ToolStatus.UNCERTAIN, error=error
        ):
            return ToolOutcome(status="fenced", seq=seq)
        return ToolOutcome(status="uncertain", seq=seq, error=error)


def _call(fn: Callable[..., JSON], args: dict[str, JSON], key: str) -> JSON:
    if _accepts_key(fn):
        return fn(**args, idempotency_key=key)
    return fn(**args)


def _accepts_key(fn: Callable[..., object]) -> bool:
    try:
        return "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _jsonable(value: JSON) -> JSON:
    """A tool's value as it will be replayed: JSON, with str() for the rest."""
    return json.loads(json.dumps(value, default=str))


def build_context(lease: leases.Lease) -> RunContext:
    """Resume from the last checkpoint, with the tool records made since."""
    if lease.epoch == 1:
        # The first lease the run ever had (submit starts at epoch 0 and
        # every transition bumps it): checkpoints and tool records are only
        # written under a lease, so there is nothing to resume from.
        return RunContext(lease, state=None, tool_seq=0, recorded={})
    last = Checkpoint.objects.filter(run_id=lease.run_id).order_by("-seq").first()
    tool_seq = last.tool_seq if last else 0
    recorded = {
        tool.seq: tool
        for tool in ToolInvocation.objects.filter(run_id=lease.run_id, seq__gte=tool_seq)
    }
    return RunContext(
        lease, state=last.state if last else None, tool_seq=tool_seq, recorded=recorded
    )


@cache
def _transient_classes(paths: tuple[str, ...]) -> tuple[type[BaseException], ...]:
    return tuple(import_string(p) for p in paths)


def decide(lease: leases.Lease) -> Outcome:
    """Run the handler for a claimed lease and say how the attempt ended.

    Writes no outcome (the worker's slot group does, fenced); the handler's
    own writes (checkpoints, tool records, events) go through the fence as
    it makes them. A database error under the handler is raised: the
    connection failed, nothing can be written now, and the lease is left to
    expire so the sweeper requeues the run (the only requeue path).
    """
    try:
        fn = registry.lookup(lease.run.kind)
    except UnknownKind as exc:
        return Failed(failure_record(exc, classification=PERMANENT, attempt=lease.attempt))
    ctx = build_context(lease)
    try:
        result = fn(ctx)
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:  # noqa: BLE001 - classified by the failure taxonomy
        transient = _transient_classes(get_settings().TRANSIENT_EXCEPTIONS)
        if classify(exc, transient) == PERMANENT:
            logger.info("Run id=%s failed permanently: %r", lease.run_id, exc)
            return Failed(permanent_failure(exc, lease.attempt))
        return GaveUp(exc)
    try:
        if isinstance(result, AskUser):
            return Waiting.of(result.question, result.state, ctx._seq)
        return Succeeded.of(result)
    except ValueError as exc:
        return Failed(
            failure_record(
                exc,
                classification=PERMANENT,
                attempt=lease.attempt,
                message=f"the handler's result could not be stored: {exc}",
            )
        )
