"""One support agent, written for each SDK (Pydantic AI in
tests/agents/killed_pydantic_ai.py, the OpenAI Agents SDK in
tests/agents/killed_openai_agents.py), for real ``runworker`` processes:
model -> lookup_order (idempotent) -> model -> refund (non-idempotent) ->
final answer. A worker imports only its SDK's module (``DEPLOYS``).

Both SDKs' models follow one script (``respond``) and both agents run the
same tools (below), so the two SDKs' tests assert the same things.
Everything that happens in the worker goes to the test ledger
(tests/handlers.py: a connection of its own, so a row survives kill -9):

- ``model``: a model request was sent (detail: its step, 0, 1, 2);
- ``offered``: the tools that request offered the model (comma-separated);
- ``saw``: what the final request carried as the refund's return;
- ``tool``: a tool's side effect (detail: the tool's name);
- ``parked``: the worker stopped at a point the test asked for with a
  ``park`` row, the first time only, and waits there to be killed.

The kinds (``KINDS``): ``killed`` (the plain agent), ``approve`` (refund
needs approval, each SDK's own way) and ``deploy`` version 1 (as
``approve``; tests/agents/killed_agents_v2.py adds version 2, whose agent
has one more tool).
"""

from __future__ import annotations

import asyncio
from typing import Any

from runqueue import db
from tests.handlers import ledger

#: The ledger's run_id column for every row here (one run at a time per test).
TAG = "agent"
PROMPT = "refund order 7"
MODEL = "m-support"
#: The answer of a run nobody interrupted (and of an approved refund).
ANSWER = "done: refunded 7"
SDKS = ("pydantic_ai", "openai_agents")
#: The handler modules of a worker of each SDK, this deploy's and the next's.
DEPLOYS = {
    "this": {sdk: [f"tests.agents.killed_{sdk}"] for sdk in SDKS},
    "next": {sdk: ["tests.agents.killed_agents_v2"] for sdk in SDKS},
}
KINDS = {
    name: {sdk: f"agents.{name}.{sdk}" for sdk in SDKS} for name in ("killed", "approve", "deploy")
}
#: How long a parked worker waits to be killed before it gives up (a test
#: that never kills it has failed already).
PARK_SECONDS = 120


def _park_asked(point: str) -> bool:
    """True the first time ``point`` is reached after the test asked to park
    there (a ``park`` row): writes ``parked``, which the test waits for."""
    with db.connect() as conn:
        asked, parked = conn.execute(
            "SELECT count(*) FILTER (WHERE what = 'park'),"
            "       count(*) FILTER (WHERE what = 'parked')"
            "  FROM runqueue_test_ledger WHERE run_id = %s AND detail = %s",
            (TAG, point),
        ).fetchone()
        if not asked or parked:
            return False
        conn.execute(
            "INSERT INTO runqueue_test_ledger (run_id, what, detail) VALUES (%s, 'parked', %s)",
            (TAG, point),
        )
        return True


async def park(point: str) -> None:
    """Stop here for good, if the test asked to (the worker is killed here)."""
    if await asyncio.to_thread(_park_asked, point):
        await asyncio.sleep(PARK_SECONDS)
        raise RuntimeError(f"parked at {point} and never killed")


async def note(what: str, detail: str) -> None:
    await asyncio.to_thread(ledger, TAG, what, detail)


async def respond(returns: list[Any], offered: list[str]) -> tuple[str, dict] | str:
    """The script of both SDKs' models: a tool call (name, arguments) or the
    final text, from the tool returns the request carries (in order)."""
    step = len(returns)
    await note("model", str(step))
    await note("offered", ",".join(sorted(offered)))
    if step == 2:
        await note("saw", str(returns[1]))
    await park(f"model-{step}")
    if step == 0:
        return ("lookup_order", {"order": 7})
    if step == 1:
        return ("refund", {"order": 7})
    return f"done: {returns[1]}"


# --- The tools (the same functions for both SDKs) --------------------------


async def lookup_order(order: int) -> dict:
    """Look an order up."""
    await note("tool", "lookup_order")
    await park("lookup_order")
    return {"id": order, "total": 40}


async def refund(order: int) -> str:
    """Refund an order."""
    await note("tool", "refund")
    await park("refund")
    return f"refunded {order}"


async def notify_customer(order: int) -> str:
    """Tell the customer about their order (version 2 of ``deploy`` only)."""
    await note("tool", "notify_customer")
    return "notified"
