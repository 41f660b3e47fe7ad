"""Handlers that simulate an agent at work, for the demo.

``demo.agent_turn`` is a chat turn: a read-only lookup, an idempotent keyed
"send email", a non-idempotent "charge card", and sometimes a question for
the user. The payload's ``scenario`` decides how it goes: ok, ask, decline
(dead-lettered), flaky (transient errors), timeout (the charge ends
uncertain).
"""

from __future__ import annotations

import random
import time
from typing import Any

import runqueue
from demo import payload as fields
from runqueue import Idempotency, RunContext

#: The demo's handlers check their whole payload and cap what it may ask of
#: them (demo.payload): its kinds are open to API tokens while the demo is on.
#: A research run sleeps at most MAX_RESEARCH_STEPS x MAX_STEP_SECONDS (five
#: minutes), and stops within one step once its lease is lost.
MAX_RESEARCH_STEPS = 60
MAX_STEP_SECONDS = 5.0
MAX_ORDER_ID = 64
MAX_TOPIC = 200
MAX_DAY = 32
SCENARIOS = ("ok", "ask", "decline", "flaky", "timeout")


def lookup_order(order_id: str) -> dict:
    time.sleep(random.uniform(0.05, 0.3))  # noqa: S311 - simulated latency
    return {"order_id": order_id, "amount_cents": 1299 + len(order_id) * 100}


def send_email(to: str, subject: str, idempotency_key: str) -> dict:
    time.sleep(random.uniform(0.05, 0.2))  # noqa: S311
    return {"to": to, "subject": subject, "message_id": f"msg-{idempotency_key}"}


def charge_card(amount_cents: int, scenario: str) -> dict:
    time.sleep(random.uniform(0.1, 0.4))  # noqa: S311
    if scenario == "decline":
        raise runqueue.PermanentError(f"card declined for {amount_cents} cents")
    if scenario == "timeout":
        raise runqueue.UncertainOutcome("payment provider timed out after the request was sent")
    return {"charged_cents": amount_cents}


@runqueue.handler("demo.agent_turn")
def agent_turn(ctx: RunContext) -> Any:
    # "answer" is what a user's reply carries when no run of the session waits.
    payload = fields.fields("demo.agent_turn", ctx.payload, ("scenario", "order_id", "answer"))
    scenario = fields.text(payload, "scenario", "ok", 16, SCENARIOS)
    order_id = fields.text(payload, "order_id", "A-100", MAX_ORDER_ID)
    if scenario == "flaky" and ctx.attempt < 3:
        raise runqueue.TransientError("model provider rate-limited the request")
    if scenario == "ask" and ctx.input is None:
        ctx.checkpoint({"asked": True})
        return ctx.ask_user({"question": f"Shall I refund order {order_id}?"})

    # Resume from the checkpoint: tool numbering continues after it, so the
    # lookup it holds must not be made again (a requeued run would otherwise
    # call lookup_order where charge_card was recorded, and fail on order).
    state = ctx.state or {}
    if "order" not in state:
        lookup = ctx.invoke_tool(
            "lookup_order",
            lookup_order,
            args={"order_id": order_id},
            idempotency=Idempotency.IDEMPOTENT,
        )
        if not lookup.ok:
            raise runqueue.TransientError(f"order lookup ended {lookup.status}")
        state = {**state, "order": lookup.value}
        ctx.checkpoint(state)
    order = state["order"]
    ctx.emit("progress", {"step": "order found", "order_id": order_id})  # to the run's stream
    charge = ctx.invoke_tool(
        "charge_card",
        charge_card,
        args={"amount_cents": order["amount_cents"], "scenario": scenario},
    )
    if charge.status == "failed" and scenario == "decline":
        raise runqueue.PermanentError(charge.error["message"])
    email = ctx.invoke_tool(
        "send_email",
        send_email,
        args={"to": "customer@example.com", "subject": f"Order {order_id}"},
        idempotency=Idempotency.IDEMPOTENT,
    )
    return {
        "order": order,
        "charge": charge.status,
        "email": email.value,
        "answer": ctx.input,
    }


@runqueue.handler("demo.research")
def research(ctx: RunContext) -> dict:
    """A longer async job: steps with checkpoints, resumable from the last."""
    payload = fields.fields("demo.research", ctx.payload, ("steps", "step_seconds", "topic"))
    steps = fields.integer(payload, "steps", 4, 0, MAX_RESEARCH_STEPS)
    step_seconds = fields.number(payload, "step_seconds", None, 0, MAX_STEP_SECONDS)
    topic = fields.text(payload, "topic", "", MAX_TOPIC)
    state = ctx.state or {"step": 0, "notes": []}
    while state["step"] < steps:
        # simulated work; a fixed step_seconds makes a long job (the demo's
        # "running" run)
        time.sleep(random.uniform(0.3, 1.0) if step_seconds is None else step_seconds)  # noqa: S311
        state = {"step": state["step"] + 1, "notes": [*state["notes"], f"finding {state['step']}"]}
        if not ctx.checkpoint(state):
            return {"stopped": "lease lost"}
    return {"summary": f"{len(state['notes'])} findings", "topic": topic}


@runqueue.handler("demo.digest")
def digest(ctx: RunContext) -> dict:
    """A maintenance job: quick, low priority."""
    day = fields.text(fields.fields("demo.digest", ctx.payload, ("day",)), "day", "today", MAX_DAY)
    time.sleep(random.uniform(0.05, 0.2))  # noqa: S311
    return {"digested": day}
