"""OpenTelemetry traces of runs, through ``opentelemetry-api`` (the optional
``[otel]`` extra). Without it every function here is a no-op.

- At submit, the W3C ``traceparent`` of the caller's current span (or, for
  the HTTP API, of the request's ``traceparent`` header) is stored in
  ``Run.traceparent``.
- A worker runs the handler in a span ``runqueue.run <kind>`` (kind
  CONSUMER) linked to that traceparent: the run is asynchronous work the
  submitting trace caused, not a call inside it. It ends when the run's
  outcome is written, with ``runqueue.run.outcome``.
- Each ``ctx.invoke_tool`` is a child span ``runqueue.tool <name>`` with
  its idempotency class and outcome; an uncertain outcome is a span event
  ``runqueue.tool.uncertain``, a lost lease a ``runqueue.fenced`` event on
  the run's span.

- With ``RUNQUEUE["TRACE_GENAI"]`` on, the usage a handler records
  (``ctx.record_usage``) is on the run's span as OpenTelemetry's GenAI
  attributes: ``gen_ai.request.model`` (the last call's model) and
  ``gen_ai.usage.input_tokens`` / ``gen_ai.usage.output_tokens`` (the
  attempt's totals so far).

Spans are recorded only once the application installs an SDK tracer
provider; with the API alone they are OpenTelemetry's no-op spans.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

try:
    from opentelemetry import trace as otel
except ImportError:  # the [otel] extra is not installed
    otel = None  # type: ignore[assignment]

from runqueue.models import PriorityClass

if TYPE_CHECKING:
    from runqueue.leases.base import Lease
    from runqueue.leases.outcomes import ToolOutcome

#: W3C trace context, version 00: exactly what is stored (55 characters).
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_incoming: ContextVar[str] = ContextVar("runqueue_incoming_traceparent", default="")

# The run span of each lease this process runs, until its outcome is
# written (possibly by another thread: the slot group that writes it).
_spans: dict[Lease, otel.Span] = {}
_spans_lock = threading.Lock()
_tracer: otel.Tracer | None = None


def enabled() -> bool:
    """True when opentelemetry-api is installed."""
    return otel is not None


def valid_traceparent(value: str | None) -> str:
    """``value`` if it is a version-00 traceparent with non-zero ids, else ""."""
    if not value:
        return ""
    value = value.strip().lower()
    match = _TRACEPARENT.match(value)
    if match is None or match.group(1) == _ZERO_TRACE or match.group(2) == _ZERO_SPAN:
        return ""
    return value


@contextmanager
def incoming(header: str | None) -> Iterator[None]:
    """Submits inside this block store the request's ``traceparent`` header
    when the caller has no current span of its own."""
    token = _incoming.set(valid_traceparent(header))
    try:
        yield
    finally:
        _incoming.reset(token)


def current_traceparent() -> str:
    """The traceparent a run submitted now stores: the caller's current
    span, else the incoming request's header, else ""."""
    if otel is not None:
        context = otel.get_current_span().get_span_context()
        if context.is_valid:
            flags = int(context.trace_flags)
            return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    return _incoming.get()


def _span_context(traceparent: str) -> otel.SpanContext | None:
    match = _TRACEPARENT.match(traceparent or "")
    if match is None:
        return None
    context = otel.SpanContext(
        trace_id=int(match.group(1), 16),
        span_id=int(match.group(2), 16),
        is_remote=True,
        trace_flags=otel.TraceFlags(int(match.group(3), 16)),
    )
    return context if context.is_valid else None


def _get_tracer() -> otel.Tracer:
    global _tracer  # noqa: PLW0603 - a ProxyTracer follows the provider set later
    if _tracer is None:
        _tracer = otel.get_tracer("runqueue")
    return _tracer


@contextmanager
def run_span(lease: Lease) -> Iterator[None]:
    """The handler's span; current inside the block, ended by ``finished``.
    None while no tracer provider is installed (the API's proxy): its spans
    record nothing and carry no context, and making one per run was ~5 % of
    a one-slot worker's samples (``py-spy record --gil``, docs/performance.md)."""
    if otel is None or isinstance(otel.get_tracer_provider(), otel.ProxyTracerProvider):
        yield
        return
    run = lease.run
    linked = _span_context(run.traceparent)
    span = _get_tracer().start_span(
        f"runqueue.run {run.kind}",
        context=otel.set_span_in_context(otel.INVALID_SPAN),  # a root: the link says why
        kind=otel.SpanKind.CONSUMER,
        links=[otel.Link(linked)] if linked is not None else None,
        attributes={
            "messaging.system": "runqueue",
            "messaging.operation.type": "process",
            "runqueue.run.id": str(run.id),
            "runqueue.run.kind": run.kind,
            "runqueue.run.class": PriorityClass.of(run.priority).slug,
            "runqueue.run.epoch": lease.epoch,
            "runqueue.run.attempt": lease.attempt,
            "runqueue.tenant": run.tenant,
        },
    )
    with _spans_lock:
        _spans[lease] = span
    with otel.use_span(span, end_on_exit=False, record_exception=True):
        yield


def finished(lease: Lease, outcome: str) -> None:
    """The run's outcome is written: end its span."""
    if otel is None:
        return
    with _spans_lock:
        span = _spans.pop(lease, None)
    if span is None:
        return
    span.set_attribute("runqueue.run.outcome", outcome)
    if outcome in ("failed", "error"):
        span.set_status(otel.Status(otel.StatusCode.ERROR, f"run {outcome}"))
    span.end()


def _run_span_of(lease: Lease) -> otel.Span:
    with _spans_lock:
        span = _spans.get(lease)
    return span if span is not None else otel.get_current_span()


def fenced(lease: Lease, action: str, current: tuple | None) -> None:
    """A span event: this worker lost the run (another epoch owns it)."""
    if otel is None:
        return
    attributes: dict[str, str | int] = {
        "runqueue.action": action,
        "runqueue.run.epoch": lease.epoch,
    }
    if current is not None:
        attributes["runqueue.run.current_epoch"] = current[0]
        attributes["runqueue.run.current_status"] = current[1]
    _run_span_of(lease).add_event("runqueue.fenced", attributes)


def usage(lease: Lease, model: str, input_tokens: int, output_tokens: int) -> None:
    """GenAI attributes on the run's span: ``input_tokens`` and
    ``output_tokens`` are the attempt's totals so far."""
    if otel is None:
        return
    span = _run_span_of(lease)
    span.set_attribute("gen_ai.request.model", model)
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)


class ToolSpan:
    """What ``tool_span`` yields: ``done(outcome)`` records how the call ended."""

    def __init__(self, span: otel.Span | None = None) -> None:
        self.span = span

    def done(self, outcome: ToolOutcome) -> None:
        span = self.span
        if span is None:
            return
        span.set_attribute("runqueue.tool.seq", outcome.seq)
        span.set_attribute("runqueue.tool.outcome", outcome.status)
        span.set_attribute("runqueue.tool.replayed", outcome.replayed)
        if outcome.status == "uncertain":
            error = outcome.error or {}
            span.add_event(
                "runqueue.tool.uncertain",
                {"runqueue.tool.error": str(error.get("message", ""))},
            )
        elif outcome.status == "failed":
            span.set_status(otel.Status(otel.StatusCode.ERROR, "tool failed"))
        elif outcome.status == "fenced":
            span.add_event("runqueue.fenced", {"runqueue.action": "invoke_tool"})


_NO_SPAN = ToolSpan()


@contextmanager
def tool_span(lease: Lease, name: str, idempotency: str) -> Iterator[ToolSpan]:
    """A tool call's span: a child of the current span, or of the run's span
    when the handler called the tool from a thread of its own."""
    if otel is None:
        yield _NO_SPAN
        return
    parent = None
    if not otel.get_current_span().get_span_context().is_valid:
        parent = otel.set_span_in_context(_run_span_of(lease))
    with _get_tracer().start_as_current_span(
        f"runqueue.tool {name}",
        context=parent,
        kind=otel.SpanKind.INTERNAL,
        attributes={
            "runqueue.tool.name": name,
            "runqueue.tool.idempotency": str(idempotency),
            "runqueue.run.id": str(lease.run_id),
        },
    ) as span:
        yield ToolSpan(span)
