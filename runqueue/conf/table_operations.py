"""The settings table's keys an operator tunes while the queue runs:
concurrency caps, budgets and prices, metrics and traces. Apart from the
other topics so that each reads whole; ``runqueue.conf.table`` assembles
them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import EMPTY, Key, Keys

SPENDING_KEYS: Keys = {
    Key("CONCURRENCY", v.CONCURRENCY, EMPTY, shown="{}", checks=("runqueue.E003",)): (
        "cap per class name on the runs of one concurrency key running at once (`None`: "
        "no cap; `0` pauses every key without a limit)"
    ),
    Key("BUDGETS", v.BUDGETS, EMPTY, shown="{}"): (
        "budgets for model calls by key; a key's `Budget` row is made from its entry on "
        "first use, and the row (the admin's Budgets page) is the budget from then on"
    ),
    Key("PRICES", v.PRICES, EMPTY, shown="{}"): (
        "model prices per million tokens: what `ctx.record_usage` charges a call recorded "
        "without a cost (a model without a price: cost unknown)"
    ),
}

OBSERVABILITY_KEYS: Keys = {
    Key("METRICS_TOKEN", v.SECRET, None): (
        "bearer token the web side's `/metrics` asks for (`None`: open)"
    ),
    Key("TRACE_GENAI", v.BOOLEAN, False): (
        "put OpenTelemetry's GenAI attributes (`gen_ai.request.model`, "
        "`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`) of the usage a handler "
        "records on the run's span"
    ),
}
