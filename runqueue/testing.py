"""Paths only tests (and a project's own tests) take: a worker never does.

A worker decides an attempt's outcome in a slot and its group writes it,
succeeded and failed ones with its next claim (``finish_and_claim``).
These write one lease's outcome alone, through the same fenced statements,
so a test can drive a run step by step without a worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runqueue import leases, runtime
from runqueue.failures import Failure
from runqueue.outcomes import Failed, Succeeded
from runqueue.types import JSON

if TYPE_CHECKING:
    from runqueue.worker.group import Group


def execute(lease: leases.Lease) -> str:
    """Run the handler for a claimed lease and write its outcome, alone.

    Returns what the run became: succeeded, failed, requeued, waiting or
    fenced.
    """
    outcome = runtime.decide(lease)
    return leases.label(lease, outcome, leases.write(lease, outcome))


def succeed(lease: leases.Lease, result: JSON = None) -> bool:
    """Finish the run as succeeded with ``result``; False once fenced.
    ValueError (nothing written) if ``result`` cannot be stored."""
    return leases.write(lease, Succeeded.of(result))


def fail(lease: leases.Lease, failure: Failure) -> bool:
    """Dead-letter the run now (a permanent failure); False once fenced."""
    return leases.write(lease, Failed(failure))


def ready(group: Group) -> list[leases.Lease]:
    """Leases ``group`` claimed ahead that no slot has started yet."""
    with group._cond:
        return list(group._ready)
