"""What every part of ``RunContext`` stands on: the lease and the run as a
handler reads them, ``check`` (the stop point of every call), and the
numbering of the steps a handler records, so that a call made again by a
later attempt meets its own record. The parts (tool calls, children, waits,
spending, other recorded steps) are mixins over this base, each in a module
of its own; ``runqueue.runtime.context`` puts them together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Concatenate, Self

from runqueue import leases
from runqueue.errors import RunCancelled, RunPaused
from runqueue.history import usage
from runqueue.leases.turns import turn_payloads
from runqueue.models import Run, ToolInvocation
from runqueue.runtime.interrupted import Interrupted
from runqueue.stream.text import TurnText
from runqueue.types import JSON

#: The number an async handler's call took on the loop, while a database
#: thread runs that call (``AsyncRunContext``): ``_number`` gives it back.
_taken = threading.local()


class ContextBase:
    """The lease, the run as a handler reads it, the calls' numbering, and
    what the parts keep for the attempt."""

    def __init__(
        self,
        lease: leases.Lease,
        *,
        state: JSON,
        tool_seq: int,
        recorded: dict[int, ToolInvocation],
        interrupted: Interrupted | None = None,
    ) -> None:
        self.lease = lease
        self.state = state
        self._seq = tool_seq
        self._recorded = recorded
        self._interrupted = interrupted
        #: The turn's streamed text (``stream``).
        self.text = TurnText(lease)
        #: Numbers the lease's model calls, so each is recorded once (``spending``).
        self._usage = usage.Recorder()
        #: The approvals of the calls running now, by number: their outcome
        #: carries it (``tool_calls``).
        self._approvals: dict[int, JSON] = {}

    @property
    def interrupted(self) -> Interrupted | None:
        """What the run this turn interrupted had done (``on_busy=
        "interrupt"``): its id, payload, last checkpoint, finished tool
        calls and streamed text; None for any other run."""
        return self._interrupted

    @property
    def payloads(self) -> list[JSON]:
        """The payloads of the submits this turn answers, in order: several
        when ``on_busy="merge"`` joined them, else ``[ctx.payload]``."""
        return turn_payloads(self.lease.run)

    @property
    def run(self) -> Run:
        return self.lease.run

    @property
    def payload(self) -> JSON:
        return self.lease.run.payload

    @property
    def input(self) -> JSON:
        """Input delivered on resume (the user's answer, a signal's data), or None."""
        return self.lease.run.input

    @property
    def timed_out(self) -> bool:
        """The last wait (a signal's, the user's) ended at its deadline."""
        return self.lease.run.timed_out

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    @property
    def fenced(self) -> bool:
        """True once another worker owns the run: stop, nothing more is written."""
        return self.lease.fenced

    @property
    def cancelled(self) -> threading.Event:
        """Set once the handler must stop (the run was cancelled or lost, or the
        worker is stopping): wait on it, or hand it to a client that can."""
        return self.lease.cancelled

    def check(self) -> None:
        """Raise ``RunCancelled`` if the handler must stop, ``RunPaused`` if
        the run was paused (every ctx call does: its steps' boundary)."""
        if self.lease.cancelled.is_set():
            raise RunCancelled(self.lease.run_id, self.lease.cancel_reason)
        if self.lease.paused:
            raise RunPaused(self.lease.run_id)

    def _number(self) -> tuple[int, ToolInvocation | None]:
        """The next call's number, and its record from an earlier attempt if
        there is one. Taken when the handler makes the call (for an async
        handler: on the loop, before anything is awaited), so the numbers
        follow the order of the calls whatever order they are run in."""
        taken = getattr(_taken, "number", None)
        if taken is not None:
            _taken.number = None
            return taken
        seq = self._seq
        self._seq += 1
        return seq, self._recorded.pop(seq, None)

    def _as_numbered[**P, R](
        self,
        number: tuple[int, ToolInvocation | None],
        method: Callable[Concatenate[Self, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """``method`` run as the call that took ``number`` earlier."""
        _taken.number = number
        try:
            return method(self, *args, **kwargs)
        finally:
            _taken.number = None

    def _lost(self) -> RunCancelled:
        """What a step that found the lease fenced raises: nothing was written."""
        return RunCancelled(self.lease.run_id, self.lease.cancel_reason or "fenced")

    def _state(self, state: JSON) -> JSON:
        """The state a returned wait carries: ``state``, or ``ctx.state`` if None."""
        return self.state if state is None else state
