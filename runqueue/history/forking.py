"""``runqueue.fork``: a finished run forked from one of its steps, with
the caller's trace (the work is in ``runqueue.leases.forks``; docs/
decisions/run-trees.md, "Forking a run")."""

from __future__ import annotations

import functools
from collections.abc import Callable

from runqueue import leases
from runqueue.models import Run
from runqueue.observability import tracing


def _traced[**P](operation: Callable[P, Run]) -> Callable[P, Run]:
    """``operation``, its fork linked to the caller's trace unless given a
    ``traceparent``: the leases, below the observability, are passed it."""

    @functools.wraps(operation)
    def traced(*args: P.args, **kwargs: P.kwargs) -> Run:
        kwargs.setdefault("traceparent", tracing.current_traceparent())
        return operation(*args, **kwargs)

    return traced


fork = _traced(leases.fork)
fork_from_failure = _traced(leases.fork_from_failure)
failure_cut = leases.failure_cut
