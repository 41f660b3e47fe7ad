"""The settings table's keys an operator tunes while the queue runs:
concurrency caps, budgets and prices, metrics and traces. Apart from the
other topics so that each reads whole; ``runqueue.conf.table`` assembles
them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import EMPTY, Setting

SPENDING = "Concurrency, budgets and cost"
OBSERVABILITY = "Observability"

SPENDING_KEYS: tuple[Setting, ...] = (
    Setting(
        name="CONCURRENCY",
        kind=v.CONCURRENCY,
        default=EMPTY,
        shown="{}",
        doc="cap per class name on the runs of one concurrency key running at once (`None`: "
        "no cap; `0` pauses every key without a limit)",
        section=SPENDING,
        checks=("runqueue.E003",),
    ),
    Setting(
        name="BUDGETS",
        kind=v.BUDGETS,
        default=EMPTY,
        shown="{}",
        doc="budgets for model calls by key; a key's `Budget` row is made from its entry on "
        "first use, and the row (the admin's Budgets page) is the budget from then on",
        section=SPENDING,
    ),
    Setting(
        name="PRICES",
        kind=v.PRICES,
        default=EMPTY,
        shown="{}",
        doc="model prices per million tokens: what `ctx.record_usage` charges a call recorded "
        "without a cost (a model without a price: cost unknown)",
        section=SPENDING,
    ),
)

OBSERVABILITY_KEYS: tuple[Setting, ...] = (
    Setting(
        name="METRICS_TOKEN",
        kind=v.SECRET,
        default=None,
        doc="bearer token the web side's `/metrics` asks for (`None`: open)",
        section=OBSERVABILITY,
    ),
    Setting(
        name="TRACE_GENAI",
        kind=v.BOOLEAN,
        default=False,
        doc="put OpenTelemetry's GenAI attributes (`gen_ai.request.model`, "
        "`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`) of the usage a handler "
        "records on the run's span",
        section=OBSERVABILITY,
    ),
)
