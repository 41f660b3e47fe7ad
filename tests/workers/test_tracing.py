"""OpenTelemetry: the traceparent stored at submit, the run's span linked to
it, tool calls as child spans, fencing and uncertain outcomes as span
events; read back from the SDK's in-memory exporter. And nothing changes
when opentelemetry is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import runqueue
from runqueue import Idempotency, RunContext, leases
from runqueue.models import Run, RunStatus
from runqueue.observability import observe, tracing
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.api_helpers import make_caller, new_key
from tests.worker_processes import REPO

pytestmark = pytest.mark.django_db(transaction=True)


def _lookup(order: str, idempotency_key: str) -> dict:
    return {"order": order}


def _charge(cents: int) -> None:
    raise runqueue.UncertainOutcome("timed out after the request was sent")


@runqueue.handler("test.traced")
def traced(ctx: RunContext) -> dict:
    found = ctx.invoke_tool(
        "lookup", _lookup, args={"order": "o-1"}, idempotency=Idempotency.IDEMPOTENT
    )
    charged = ctx.invoke_tool("charge", _charge, args={"cents": 500})
    return {"lookup": found.status, "charge": charged.status}


@pytest.fixture(scope="module")
def _provider() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process: the global provider
    yield exporter
    exporter.shutdown()  # later tests' spans are dropped, not kept in memory


@pytest.fixture
def spans(_provider: InMemorySpanExporter) -> InMemorySpanExporter:
    _provider.clear()
    return _provider


def _traceparent(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _by_name(finished: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name.startswith(prefix)]


def test_submit_stores_the_callers_current_span(spans) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller:
        run = runqueue.submit(kind="k").run
    assert Run.objects.get(id=run.id).traceparent == _traceparent(caller)
    assert runqueue.submit(kind="k").run.traceparent == ""  # no span, no header


def test_an_http_submit_stores_the_requests_traceparent(spans) -> None:
    alice = make_caller("alice", "acme")
    header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    for sent, stored in [(header, header), (header.upper(), header), ("00-zz-1-01", "")]:
        response = Client().post(
            "/api/runs/",
            data=json.dumps({"kind": "k"}),
            content_type="application/json",
            headers=alice.headers(new_key(), traceparent=sent),
        )
        assert response.status_code == 201, response.content
        assert Run.objects.get(id=response.json()["id"]).traceparent == stored


def test_the_run_span_links_the_submit_and_parents_its_tool_spans(spans) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("submit request") as caller:
        run = runqueue.submit(kind="test.traced", tenant="acme").run
    spans.clear()
    config = PoolConfig(slots=(SlotSpec.parse("interactive=1"),), burst=True, worker_id="t1")
    assert Pool(config).run() == 0
    assert Run.objects.get(id=run.id).status == RunStatus.SUCCEEDED

    finished = spans.get_finished_spans()
    [run_span] = _by_name(finished, "runqueue.run ")
    assert run_span.name == "runqueue.run test.traced"
    assert run_span.kind == trace.SpanKind.CONSUMER
    assert run_span.parent is None  # a trace of its own, linked to the submit
    [link] = run_span.links
    assert link.context.trace_id == caller.get_span_context().trace_id
    assert link.context.span_id == caller.get_span_context().span_id
    assert run_span.attributes["runqueue.run.id"] == str(run.id)
    assert run_span.attributes["runqueue.run.kind"] == "test.traced"
    assert run_span.attributes["runqueue.run.class"] == "interactive"
    assert run_span.attributes["runqueue.run.epoch"] == 1
    assert run_span.attributes["runqueue.run.attempt"] == 1
    assert run_span.attributes["runqueue.run.outcome"] == "succeeded"

    tools = {s.attributes["runqueue.tool.name"]: s for s in _by_name(finished, "runqueue.tool ")}
    assert set(tools) == {"lookup", "charge"}
    for tool in tools.values():
        assert tool.parent.span_id == run_span.context.span_id
        assert tool.context.trace_id == run_span.context.trace_id
        assert tool.end_time <= run_span.end_time
    assert tools["lookup"].attributes["runqueue.tool.idempotency"] == "idempotent"
    assert tools["lookup"].attributes["runqueue.tool.outcome"] == "completed"
    assert tools["lookup"].events == ()
    assert tools["charge"].attributes["runqueue.tool.idempotency"] == "non_idempotent"
    assert tools["charge"].attributes["runqueue.tool.outcome"] == "uncertain"
    [uncertain] = tools["charge"].events
    assert uncertain.name == "runqueue.tool.uncertain"
    assert "timed out" in uncertain.attributes["runqueue.tool.error"]


def test_a_lost_lease_is_a_span_event_on_the_run_span(spans) -> None:
    runqueue.submit(kind="k")
    lease = leases.claim_one("w")
    with observe.run_span(lease):
        runqueue.cancel(lease.run_id, reason="user left", actor="t")
        assert not leases.heartbeat(lease)
    observe.finished(lease, "fenced", 0.01)
    [run_span] = _by_name(spans.get_finished_spans(), "runqueue.run ")
    [event] = run_span.events
    assert event.name == "runqueue.fenced"
    assert event.attributes["runqueue.action"] == "heartbeat"
    assert event.attributes["runqueue.run.epoch"] == 1
    assert event.attributes["runqueue.run.current_epoch"] == 2
    assert event.attributes["runqueue.run.current_status"] == "cancelled"
    assert run_span.attributes["runqueue.run.outcome"] == "fenced"


def test_malformed_traceparents_are_not_stored() -> None:
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.valid_traceparent(f"  {good} ") == good
    for bad in (
        None,
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        good + "-extra",
    ):
        assert tracing.valid_traceparent(bad) == ""


WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed
import django
django.setup()
from django.core.management import call_command
from runqueue.observability import tracing
assert not tracing.enabled()
call_command("runworker", "--burst", "--slots", "interactive=1")
"""


def test_nothing_changes_without_opentelemetry() -> None:
    """A worker without opentelemetry runs handlers and tools as before."""
    run = runqueue.submit(kind="test.pay").run
    db = connection.settings_dict
    database = {k: db[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT")}
    env = dict(os.environ) | {
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "RUNQUEUE_TEST_DATABASE": json.dumps(database),
    }
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    run = Run.objects.get(id=run.id)
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, {"charge": "uncertain"})


@pytest.mark.parametrize("opted_in", [True, False])
def test_recorded_usage_is_on_the_run_span_as_genai_attributes_when_asked(
    spans, settings, opted_in: bool
) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, "TRACE_GENAI": opted_in}
    calls = [{"model": "m-1", "in": 100, "out": 7}, {"model": "m-2", "in": 50, "out": 3}]
    run = runqueue.submit(kind="test.usage", payload={"calls": calls}).run
    config = PoolConfig(slots=(SlotSpec.parse("interactive=1"),), burst=True, worker_id="t1")
    assert Pool(config).run() == 0
    assert Run.objects.get(id=run.id).status == RunStatus.SUCCEEDED
    [run_span] = _by_name(spans.get_finished_spans(), "runqueue.run ")
    genai = {k: v for k, v in run_span.attributes.items() if k.startswith("gen_ai.")}
    if not opted_in:
        assert genai == {}
        return
    assert genai == {
        "gen_ai.request.model": "m-2",
        "gen_ai.usage.input_tokens": 150,
        "gen_ai.usage.output_tokens": 10,
    }
