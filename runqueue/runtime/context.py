"""``RunContext``: what a sync handler sees of its run, and the only way
it writes.

Its calls are grouped by concern, one mixin a module over
``runqueue.runtime.context_base`` (the lease, the run, ``check``, the
calls' numbering): tool calls and approvals (``tool_calls``), child runs
(``children``), waits (``waits``), budgets and usage (``spending``), and the
other recorded steps, schedules, patches and steers (``recorded_steps``).
What is left here: the heartbeat, checkpoints and the run's live stream."""

from __future__ import annotations

from runqueue import leases
from runqueue.runtime.children import Children
from runqueue.runtime.recorded_steps import RecordedSteps
from runqueue.runtime.spending import Spending
from runqueue.runtime.tool_calls import ToolCalls
from runqueue.runtime.waits import Waits
from runqueue.stream.emit import emit as stream_emit
from runqueue.types import JSON


class RunContext(ToolCalls, Children, Waits, Spending, RecordedSteps):
    """What a handler sees of its run, and the only way it writes."""

    def heartbeat(self) -> bool:
        self.check()
        return leases.heartbeat(self.lease)

    def checkpoint(self, state: JSON) -> bool:
        """Save ``state``; a later attempt resumes with it as ``ctx.state``."""
        self.check()
        return self._checkpoint_at(state, self._seq)

    def _checkpoint_at(self, state: JSON, tool_seq: int) -> bool:
        """``checkpoint`` after the first ``tool_seq`` calls (the number the
        async context read when the handler made the call)."""
        ok = leases.checkpoint(self.lease, state, tool_seq=tool_seq)
        if ok:
            self.state = state
        return ok

    def emit(self, event_type: str, data: dict[str, JSON] | None = None) -> bool:
        """Publish a progress event to the run's stream (through the fence);
        False once fenced. ValueError for a reserved type or oversized data."""
        self.check()
        return stream_emit(self.lease, event_type, data)

    def stream(self, text: str) -> bool:
        """Send a text delta to the run's live stream clients (no row per
        delta: ``runqueue.stream.text``); False once fenced. TypeError or
        ValueError for text that is not a str or holds NUL."""
        self.check()
        return self.text.stream(text)
