"""What a handler spends: the ``RunContext`` part for budgets (a request
and tokens reserved before a model call, settled after it, or a wait until
they fit) and usage (each model call's tokens and cost, recorded once,
even once the run is lost)."""

from __future__ import annotations

from decimal import Decimal

from runqueue import leases
from runqueue.capacity import budgets
from runqueue.history import usage
from runqueue.leases.outcomes import BudgetWait
from runqueue.observability import observe
from runqueue.runtime.context_base import ContextBase
from runqueue.types import JSON
from runqueue.validation import check_state


class Spending(ContextBase):
    """``reserve``, ``settle``, ``wait_for_budget`` and ``record_usage``."""

    def reserve(self, key: str, tokens: int) -> bool:
        """Reserve one request and ``tokens`` on budget ``key`` for a further
        model call: True when it fits now (settle it after the call); when
        it does not, return ``ctx.wait_for_budget(key, tokens)``."""
        self.check()
        key, tokens = budgets.declared("reserve", key, tokens)
        return leases.reserve(self.lease, key, tokens)

    def settle(self, *, tokens: int, key: str | None = None) -> int | None:
        """Correct the oldest unsettled reservation (the claim's, or a
        ``reserve``'s; of ``key`` if given) to the tokens the call used: the
        difference is refunded or charged. Returns it; None once fenced."""
        self.check()
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"settle: tokens must be an integer >= 0, got {tokens!r}")
        return leases.settle(self.lease, tokens, key)

    def wait_for_budget(self, key: str, tokens: int, state: JSON = None) -> BudgetWait:
        """Return this from the handler when ``reserve`` said no: the run
        gives its slot back (no attempt used) and is claimed again once one
        request and ``tokens`` are reserved on ``key``; the handler then
        resumes from ``state`` (``ctx.state``) holding that reservation."""
        self.check()
        return self._wait_for_budget_at(key, tokens, state, self._seq)

    def _wait_for_budget_at(self, key: str, tokens: int, state: JSON, tool_seq: int) -> BudgetWait:
        """``wait_for_budget`` after the first ``tool_seq`` calls."""
        key, tokens = budgets.declared("wait_for_budget", key, tokens)
        state = self._state(state)
        check_state(state)
        return BudgetWait(key, tokens, state, tool_seq)

    def record_usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | Decimal | None = None,
    ) -> Decimal | None:
        """Record one model call's tokens and cost (None: priced from
        ``RUNQUEUE["PRICES"]``, per million tokens; unknown for a model
        without a price); the cost recorded. Written without the fence, so
        it counts even once the run is lost or cancelled, and never twice
        for one call. ValueError for bad input; SpendCapReached (a
        PermanentError) once the run's tree reached its spend cap, whose
        live runs are then cancelled (docs/decisions/run-trees.md, "Usage and cost")."""
        checked = usage.checked(model, input_tokens, output_tokens, cost)
        return self._record_usage_numbered(self._usage.number(), *checked)

    def _record_usage_numbered(
        self, call: int, model: str, input_tokens: int, output_tokens: int, cost: Decimal | None
    ) -> Decimal | None:
        """``record_usage`` as the lease's call number ``call``."""
        lease = self.lease
        recorded = usage.record(
            lease.run,
            epoch=lease.epoch,
            token=lease.token,
            attempt=lease.attempt,
            call=call,
            root=self._usage.root(lease.run_id),
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost,
        )
        if recorded.counted:
            observe.usage(lease, model, input_tokens, output_tokens, cost)
        if recorded.capped:
            raise usage.end_capped_tree(recorded)
        return cost
