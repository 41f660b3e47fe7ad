"""A worker's Prometheus metrics: claims, finishes by outcome, fenced
writes, uncertain tool outcomes, claim latency and run duration per class,
and the model tokens and cost its handlers recorded.

Registered in prometheus-client's default registry, so ``runworker
--metrics-port`` serves them with the process collectors. The queue's own
gauges (depth, oldest due run, dead letters) are read from the database by
the web side instead (``runqueue.observability.queue_metrics``): one scrape, not one per
worker. The per-run cost is a few dictionary look-ups: the labelled children
are made once, here.
"""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from runqueue.leases.outcomes import Reported
from runqueue.models import PriorityClass

OUTCOMES = tuple(o.value for o in Reported)

CLAIMS = Counter("runqueue_worker_claims", "Runs this worker claimed (and started).", ["class"])
FINISHES = Counter(
    "runqueue_worker_finishes",
    "Runs this worker finished, by outcome: succeeded, failed, requeued, waiting "
    "(for the user), fenced (another worker owns the run now), error (left to lease expiry), "
    "given_back (claimed ahead, never started, queued again).",
    ["class", "outcome"],
)
FENCED = Counter(
    "runqueue_worker_fenced_writes",
    "Leases this worker lost: a write found the run owned by another epoch (one per lease).",
    ["class"],
)
UNCERTAIN = Counter(
    "runqueue_worker_uncertain_tool_outcomes",
    "Tool invocations that ended uncertain in this worker (not replays).",
    ["class"],
)
CLAIM_LATENCY = Histogram(
    "runqueue_worker_claim_latency_seconds",
    "From when a run was due to its claim.",
    ["class"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
RUN_DURATION = Histogram(
    "runqueue_worker_run_duration_seconds",
    "From a run's start in a slot to its finish being written.",
    ["class"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
TOKENS = Counter(
    "runqueue_worker_tokens",
    "Model tokens handlers in this worker recorded (ctx.record_usage), by kind, model and "
    "direction (input, output); a call counted once.",
    ["kind", "model", "direction"],
)
COST = Counter(
    "runqueue_worker_cost",
    "Cost handlers in this worker recorded (ctx.record_usage: given, or priced from "
    "RUNQUEUE['PRICES']), by kind and model; a call of unknown cost adds nothing.",
    ["kind", "model"],
)
INFO = Gauge("runqueue_worker_info", "This worker process; always 1.", ["worker_id"])

# The ``class`` label's value is the class's slug; children by class index.
_claims = tuple(CLAIMS.labels(c) for c in PriorityClass.slugs())
_fenced = tuple(FENCED.labels(c) for c in PriorityClass.slugs())
_uncertain = tuple(UNCERTAIN.labels(c) for c in PriorityClass.slugs())
_latency = tuple(CLAIM_LATENCY.labels(c) for c in PriorityClass.slugs())
_duration = tuple(RUN_DURATION.labels(c) for c in PriorityClass.slugs())
_finishes = {(c.index, o): FINISHES.labels(c.slug, o) for c in PriorityClass for o in OUTCOMES}


def claimed(priority: int, wait_seconds: float) -> None:
    i = PriorityClass.of(priority).index
    _claims[i].inc()
    _latency[i].observe(wait_seconds)


def finished(priority: int, outcome: Reported, seconds: float | None) -> None:
    cls = PriorityClass.of(priority)
    _finishes[cls.index, outcome].inc()
    if seconds is not None:
        _duration[cls.index].observe(seconds)


def fenced(priority: int) -> None:
    _fenced[PriorityClass.of(priority).index].inc()


def uncertain(priority: int) -> None:
    _uncertain[PriorityClass.of(priority).index].inc()


def usage(
    kind: str, model: str, input_tokens: int, output_tokens: int, cost: float | None
) -> None:
    TOKENS.labels(kind, model, "input").inc(input_tokens)
    TOKENS.labels(kind, model, "output").inc(output_tokens)
    if cost is not None:
        COST.labels(kind, model).inc(cost)


def serve(port: int, host: str, worker_id: str) -> WSGIServer:
    """Serve this process's metrics over HTTP (``runworker --metrics-port``);
    the server runs in a daemon thread. Returns prometheus-client's server
    (``shutdown()`` stops it)."""
    INFO.labels(worker_id).set(1)
    server, _thread = start_http_server(port, addr=host)
    return server
