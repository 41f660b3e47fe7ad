"""What a worker reports per run, in one place: the log line with its
structured fields (``logfmt``), the Prometheus counters (``metrics``) and the
OpenTelemetry spans (``tracing``), all in ``runqueue.observability``.

The worker calls these at a handful of points (a slot starts a run, the
pool learns its outcome, a write finds the lease lost, a tool call), one
line each. Per run they cost a few dictionary look-ups and, with
OpenTelemetry installed, the spans; nothing is formatted unless a handler
writes the log record.

A run that is claimed and succeeds logs at DEBUG: on a busy worker those two
lines were a tenth of its CPU (the handler's lock and a write to stdout per
line), and what an operator counts is in the Prometheus counters, what they
debug in the run's events and trace. Every other outcome (failed, requeued,
waiting, error) and every fenced write logs at INFO or WARNING as before
(docs/performance.md, "Per-run logging").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from runqueue.conf import get_settings
from runqueue.leases import base as lease_base
from runqueue.models import PriorityClass
from runqueue.observability import metrics, tracing

if TYPE_CHECKING:
    from decimal import Decimal

    from runqueue.leases.base import Lease
    from runqueue.leases.outcomes import Reported, ToolOutcome

logger = logging.getLogger("runqueue.worker")
lease_logger = logging.getLogger("runqueue.leases")
run_span = tracing.run_span


def _class(priority: int) -> str:
    return PriorityClass.of(priority).slug


def _fields(lease: Lease, **more: object) -> dict[str, object]:
    """A run's log record fields: which run, which lease, then ``more``."""
    run = lease.run
    return {
        "run_id": run.id,
        "kind": run.kind,
        "class": _class(run.priority),
        "epoch": lease.epoch,
        **more,
    }


def claimed(lease: Lease) -> None:
    """A slot starts a run it claimed."""
    run = lease.run
    due = max(run.created_at, run.scheduled_for or run.created_at)
    claimed_at = run.heartbeat_at or due  # a claim sets it
    wait = max((claimed_at - due).total_seconds(), 0.0)
    metrics.claimed(run.priority, wait)
    if not logger.isEnabledFor(logging.DEBUG):
        return
    logger.debug(
        "Claimed run id=%s kind=%s class=%s epoch=%s attempt=%s wait_ms=%d",
        run.id,
        run.kind,
        _class(run.priority),
        lease.epoch,
        lease.attempt,
        wait * 1000,
        extra=_fields(lease, attempt=lease.attempt, wait_ms=round(wait * 1000)),
    )


def finished(lease: Lease, outcome: Reported, seconds: float | None) -> None:
    """The run's outcome is written (or left to lease expiry: ``error``)."""
    run = lease.run
    metrics.finished(run.priority, outcome, seconds)
    with _usage_lock:
        _usage_totals.pop(lease, None)
    tracing.finished(lease, outcome)
    level = logging.DEBUG if outcome == "succeeded" else logging.INFO
    if not logger.isEnabledFor(level):
        return
    duration_ms = round(seconds * 1000) if seconds is not None else 0
    logger.log(
        level,
        "Finished run id=%s kind=%s outcome=%s epoch=%s duration_ms=%d",
        run.id,
        run.kind,
        outcome,
        lease.epoch,
        duration_ms,
        extra=_fields(lease, attempt=lease.attempt, outcome=outcome, duration_ms=duration_ms),
    )


def fenced(lease: Lease, action: str, current: tuple | None) -> None:
    """A write found the lease lost: ``current`` is the run's (epoch, status)."""
    run = lease.run
    metrics.fenced(run.priority)
    tracing.fenced(lease, action, current)
    lease_logger.warning(
        "Fenced run id=%s epoch=%s action=%s now=%s",
        run.id,
        lease.epoch,
        action,
        current,
        extra=_fields(
            lease,
            outcome="fenced",
            action=action,
            current_epoch=current[0] if current else None,
        ),
    )


# runqueue.leases reports lost leases through its hook (it does not import
# this module); imported by the app's ready(), so every process has it.
lease_base.observers.fenced = fenced


#: Tokens each lease's handler recorded so far: (input, output), for the
#: span's GenAI totals. Dropped with the span (``finished``).
_usage_totals: dict[Lease, tuple[int, int]] = {}
_usage_lock = threading.Lock()


def usage(
    lease: Lease, model: str, input_tokens: int, output_tokens: int, cost: Decimal | None
) -> None:
    """A model call recorded (``ctx.record_usage``), counted for the first
    time: the counters, and the span's GenAI attributes if asked for."""
    run = lease.run
    metrics.usage(
        run.kind, model, input_tokens, output_tokens, float(cost) if cost is not None else None
    )
    if not get_settings().TRACE_GENAI:
        return
    with _usage_lock:
        seen_in, seen_out = _usage_totals.get(lease, (0, 0))
        totals = (seen_in + input_tokens, seen_out + output_tokens)
        _usage_totals[lease] = totals
    tracing.usage(lease, model, *totals)


class _Tool:
    def __init__(self, lease: Lease, span: tracing.ToolSpan) -> None:
        self.lease = lease
        self.span = span

    def done(self, outcome: ToolOutcome) -> None:
        self.span.done(outcome)
        if outcome.status == "uncertain" and not outcome.replayed:
            metrics.uncertain(self.lease.run.priority)


@contextmanager
def tool(lease: Lease, name: str, idempotency: str) -> Iterator[_Tool]:
    """Around one ``ctx.invoke_tool``: its span; ``done(outcome)`` at the end."""
    with tracing.tool_span(lease, name, idempotency) as span:
        yield _Tool(lease, span)
