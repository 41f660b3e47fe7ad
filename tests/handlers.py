"""Handlers the tests submit to, in this process and in runworker subprocesses.

Side effects go to the table ``runqueue_test_ledger`` through a connection of
their own (autocommit), so they survive a fenced or killed worker: the tests
count them to prove at-most-once and at-least-once claims.
"""

from __future__ import annotations

import time
from typing import Any

import runqueue
from runqueue import Idempotency, RunContext, db

LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS runqueue_test_ledger (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    what text NOT NULL,
    detail text NOT NULL DEFAULT '',
    pid int NOT NULL DEFAULT pg_backend_pid(),
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def ledger(run_id: Any, what: str, detail: str = "") -> None:
    """Record a side effect outside the worker's transactions."""
    with db.connect() as conn:
        conn.execute(
            "INSERT INTO runqueue_test_ledger (run_id, what, detail) VALUES (%s, %s, %s)",
            (str(run_id), what, detail),
        )


def released(run_id: Any, what: str = "release") -> bool:
    with db.connect() as conn:
        row = conn.execute(
            "SELECT 1 FROM runqueue_test_ledger WHERE run_id = %s AND what = %s",
            (str(run_id), what),
        ).fetchone()
    return row is not None


def wait_for_release(ctx: RunContext, what: str = "release", timeout: float = 60) -> None:
    """Block (heartbeating through the worker) until the test writes ``what``."""
    deadline = time.monotonic() + timeout
    while not released(ctx.run.id, what):
        if time.monotonic() > deadline:
            raise TimeoutError(f"test never wrote {what!r}")
        time.sleep(0.02)


def _echo(ctx: RunContext) -> Any:
    return {"echo": ctx.payload}


# Plain kinds the queue-core tests submit (and never execute).
for _kind in ("k", "other", "chat.turn", "agent.turn", "test.echo"):
    runqueue.handler(_kind)(_echo)


@runqueue.handler("test.record")
def record(ctx: RunContext) -> dict:
    ledger(ctx.run.id, "ran", ctx.lease.owner)
    return {"owner": ctx.lease.owner}


def _charge(run_id: str, cents: int, idempotency_key: str) -> dict:
    ledger(run_id, "charge", idempotency_key)
    return {"charged": cents}


def _send_email(run_id: str, to: str, idempotency_key: str) -> dict:
    ledger(run_id, "email", idempotency_key)
    return {"sent": to}


@runqueue.handler("test.tools")
def tools(ctx: RunContext) -> dict:
    """Calls a tool of the class in the payload, blocking inside it until
    released, so the test can kill or freeze the worker mid-call."""
    idem = ctx.payload.get("idempotency", Idempotency.NON_IDEMPOTENT)

    def effect(run_id: str, idempotency_key: str) -> dict:
        ledger(run_id, "effect", idempotency_key)
        if ctx.payload.get("block"):
            wait_for_release(ctx)
        return {"done": True}

    outcome = ctx.invoke_tool("effect", effect, args={"run_id": str(ctx.run.id)}, idempotency=idem)
    ledger(ctx.run.id, "outcome", outcome.status)
    return {"tool": outcome.status, "owner": ctx.lease.owner}


@runqueue.handler("test.block")
def block(ctx: RunContext) -> dict:
    """Starts, then waits for the test's release; records who finished."""
    ledger(ctx.run.id, "started", ctx.lease.owner)
    wait_for_release(ctx)
    if ctx.fenced or not ctx.heartbeat():
        ledger(ctx.run.id, "noticed_fenced", ctx.lease.owner)
        return None
    ledger(ctx.run.id, "finishing", ctx.lease.owner)
    return {"finished_by": ctx.lease.owner}


@runqueue.handler("test.pausable")
def pausable(ctx: RunContext) -> dict:
    """Two recorded steps with a wait for the test's release between them:
    a pause lands while the handler waits, the second step's ctx call is
    its next step boundary."""

    def step(run_id: str, idempotency_key: str, n: int) -> int:
        ledger(run_id, f"step{n}", idempotency_key)
        return n

    args = {"run_id": str(ctx.run.id)}
    first = ctx.invoke_tool("first", step, args={**args, "n": 1})
    wait_for_release(ctx)
    second = ctx.invoke_tool("second", step, args={**args, "n": 2})
    return {"steps": [first.value, second.value]}


@runqueue.handler("test.freeze_in_fence")
def freeze_in_fence(ctx: RunContext) -> dict:
    """Checkpoints. The owner ``payload["freeze"]`` names (a worker id) stops
    inside the checkpoint's fenced transaction, which holds the run's row
    lock, after recording that transaction's server backend, until the test
    writes "thaw": the test freezes the worker there."""
    from django.db import connection

    from runqueue.leases import hooks

    def inside(lease: Any, action: str) -> None:
        if lease.run_id != ctx.run.id or not lease.owner.startswith(f"{ctx.payload['freeze']}/"):
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            ledger(ctx.run.id, "inside_fence", str(cursor.fetchone()[0]))
        wait_for_release(ctx, "thaw")
        ledger(ctx.run.id, "thawed", lease.owner)

    hooks.inside_fence = inside
    try:
        ctx.checkpoint({"by": ctx.lease.owner})
    finally:
        hooks.inside_fence = None
    ledger(ctx.run.id, "finishing", ctx.lease.owner)
    return {"finished_by": ctx.lease.owner}


@runqueue.handler("test.ask")
def ask(ctx: RunContext) -> Any:
    """Asks the user once, then completes with the answer."""
    if ctx.input is None:
        ctx.checkpoint({"asked": True})
        return ctx.ask_user({"question": "Which day?"})
    return {"answer": ctx.input, "state": ctx.state}


@runqueue.handler("test.fail")
def fail(ctx: RunContext) -> None:
    kind = ctx.payload.get("error", "value")
    if kind == "permanent":
        raise runqueue.PermanentError("card declined")
    if kind == "transient":
        raise runqueue.TransientError("rate limited")
    raise ValueError("unexpected shape")


@runqueue.handler("test.pay")
def pay(ctx: RunContext) -> Any:
    """Checkpoints, then a payment whose outcome is unknown: an uncertain run."""

    def charge(cents: int) -> None:
        raise runqueue.UncertainOutcome("timed out after the request was sent")

    ctx.checkpoint({"step": "charging"})
    outcome = ctx.invoke_tool(
        "charge_card", charge, args={"cents": 1299}, idempotency=Idempotency.NON_IDEMPOTENT
    )
    if ctx.payload.get("then_fail"):
        raise runqueue.PermanentError("order service refused the refund")
    return {"charge": outcome.status}


# A kind with a long name, for the admin's layout at 1366 px.
runqueue.handler("test.customer-support.refund-negotiation-with-escalation")(_echo)


@runqueue.handler("test.cooperative")
def cooperative(ctx: RunContext) -> dict:
    """Waits until told to stop (ctx.cancelled), records why, and returns."""
    ledger(ctx.run.id, "started", ctx.lease.owner)
    if ctx.cancelled.wait(120):
        ledger(ctx.run.id, "cancelled", ctx.lease.cancel_reason)
        ctx.heartbeat()  # raises RunCancelled: every ctx call after the cancel does
    return {"cancelled": False}


@runqueue.handler("test.async_cooperative")
async def async_cooperative(ctx: Any) -> dict:
    """Awaits a long fake model call; records the CancelledError it gets."""
    import asyncio

    ledger(ctx.run.id, "started", ctx.lease.owner)
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        ledger(ctx.run.id, "cancelled", ctx.lease.cancel_reason)
        raise
    return {"cancelled": False}


@runqueue.handler("test.host_time")
def host_time(ctx: RunContext) -> dict:
    """The worker host's clock (a test runs the worker under libfaketime),
    with a tool call whose record the database times."""
    ctx.invoke_tool("noop", lambda: None, idempotency=Idempotency.IDEMPOTENT)
    return {"host_time": time.time()}


def token_deltas(seed: int, count: int) -> list[str]:
    """``count`` deltas like a model's: words, accents, emoji, a newline now
    and then, and one delta past a NOTIFY payload's 8000 bytes."""
    import random

    rng = random.Random(seed)
    words = ["the", "queue", "é", "run", "🙂", "lease", "\n", "naïve", "日本", "token"]
    out = [rng.choice(words) + rng.choice(["", " ", ", "]) for _ in range(count)]
    if count > 10:
        out[count // 2] = "€" * 3000  # 9000 bytes: split into pieces
    return out


@runqueue.handler("test.stream")
def stream_tokens(ctx: RunContext) -> dict:
    """Streams payload["deltas"] deltas (seed payload["seed"]), pausing
    payload["pace_ms"] between them; ``raise`` at the end if asked."""
    payload = ctx.payload
    text = []
    for delta in token_deltas(payload.get("seed", 0), payload["deltas"]):
        try:
            sent = ctx.stream(delta)
        except runqueue.RunCancelled:
            sent = False
        if not sent:  # what was published before the fence, for the test
            ledger(ctx.run.id, "stream.stopped", str(ctx.text.offset))
            return {"fenced": True}
        text.append(delta)
        if payload.get("pace_ms"):
            ctx.cancelled.wait(payload["pace_ms"] / 1000)
    if payload.get("raise"):
        raise runqueue.PermanentError("failed after streaming")
    if payload.get("ask"):
        return ctx.ask_user("more?")
    return {"text": "".join(text)}


@runqueue.handler("test.async_stream")
async def async_stream_tokens(ctx: Any) -> dict:
    """``test.stream``, awaited."""
    text = []
    for delta in token_deltas(ctx.payload.get("seed", 0), ctx.payload["deltas"]):
        if not await ctx.stream(delta):
            return {"fenced": True}
        text.append(delta)
    return {"text": "".join(text)}


# --- sub-agents and durable waits ---------------------------------------------


@runqueue.handler("test.fanout")
def fanout(ctx: RunContext) -> Any:
    """Spawns payload["n"] children of payload["child"] (payload["child_payload"]),
    waits for them all, and on resume records the resume and returns their
    statuses in spawn order. payload["pause"]: seconds between spawns (a
    "spawned" ledger line after each), payload["linger"]: seconds the resumed
    turn works before it returns (so a test can kill a worker there)."""
    if ctx.state is None:
        for i in range(ctx.payload.get("n", 3)):
            child = ctx.spawn(
                ctx.payload.get("child", "test.echo"),
                {"i": i, **ctx.payload.get("child_payload", {})},
            )
            if ctx.payload.get("pause"):
                ledger(ctx.run.id, "spawned", str(child))
                ctx.cancelled.wait(ctx.payload["pause"])
        return ctx.wait_for_children(state={"joined": True})
    ledger(ctx.run.id, "resumed", str(ctx.lease.epoch))
    if ctx.payload.get("linger"):
        ctx.cancelled.wait(ctx.payload["linger"])
    return {"children": [[str(c.id), c.status, c.result] for c in ctx.children()]}


@runqueue.handler("test.tree")
def tree(ctx: RunContext) -> Any:
    """A level of a tree: spawns payload["width"] children one level deeper
    until payload["depth"] is 0, then leaves wait until cancelled."""
    depth = ctx.payload.get("depth", 0)
    if depth <= 0:
        ctx.cancelled.wait(120)
        return {"leaf": True}
    if ctx.state is None:
        for _ in range(ctx.payload.get("width", 2)):
            ctx.spawn("test.tree", {"depth": depth - 1, "width": ctx.payload.get("width", 2)})
        return ctx.wait_for_children(state={"joined": True})
    return {"children": len(ctx.children())}


@runqueue.handler("test.wait_signal")
def wait_signal(ctx: RunContext) -> Any:
    """Waits for signal "go" (payload["timeout"] seconds at most), then
    returns what the resume brought."""
    if ctx.state is None:
        return ctx.wait_for_signal(
            "go", timeout=ctx.payload.get("timeout"), state={"waited": True}
        )
    ledger(ctx.run.id, "resumed", str(ctx.lease.epoch))
    return {"input": ctx.input, "timed_out": ctx.timed_out}


@runqueue.handler("test.sleep")
def sleep_until_handler(ctx: RunContext) -> Any:
    """Sleeps until payload["until"] (ISO 8601), then returns."""
    import datetime as dt

    if ctx.state is None:
        return ctx.sleep_until(
            dt.datetime.fromisoformat(ctx.payload["until"]), state={"slept": True}
        )
    return {"timed_out": ctx.timed_out}


@runqueue.handler("test.async_fanout")
async def async_fanout(ctx: Any) -> Any:
    """test.fanout as an async handler: spawn and children() awaited."""
    if ctx.state is None:
        for i in range(2):
            await ctx.spawn("test.echo", {"i": i})
        return ctx.wait_for_children(state={"joined": True})
    if ctx.state.get("joined") and ctx.input is None and not ctx.timed_out:
        children = await ctx.children()
        return ctx.wait_for_signal(
            "go", timeout=60, state={"children": [c.status for c in children]}
        )
    return {"children": ctx.state["children"], "input": ctx.input}


@runqueue.handler("test.huge_timeout")
def huge_timeout(ctx: RunContext) -> Any:
    """Asks to wait for a signal 1e13 seconds at most: past any deadline
    PostgreSQL can hold (refused at the call)."""
    return ctx.wait_for_signal("go", timeout=1e13)


#: ``test.async_rendezvous``: per payload["group"], how many handlers have
#: arrived, and the event set once payload["n"] have (on the worker's loop).
_RENDEZVOUS: dict[str, list] = {}


@runqueue.handler("test.async_rendezvous")
async def async_rendezvous(ctx: Any) -> dict:
    """Waits, on the event loop, until payload["n"] handlers of its group
    are waiting at once (a barrier): they all get there only if the worker
    runs them all concurrently. Gives up after payload["timeout"] seconds."""
    import asyncio

    group, n = ctx.payload["group"], ctx.payload["n"]
    arrived = _RENDEZVOUS.setdefault(group, [0, asyncio.Event()])
    arrived[0] += 1
    if arrived[0] >= n:
        arrived[1].set()
    try:
        await asyncio.wait_for(arrived[1].wait(), ctx.payload.get("timeout", 60))
    except TimeoutError:
        return {"met": False, "arrived": arrived[0]}
    return {"met": True}


@runqueue.handler("test.nap")
def nap(ctx: RunContext) -> dict:
    """A sub-agent that works payload["seconds"] (heartbeating through the
    worker), recording when it started and ended, and by whom."""
    ledger(ctx.run.id, "started", ctx.lease.owner)
    if ctx.cancelled.wait(ctx.payload.get("seconds", 1.0)):
        ctx.check()
    ledger(ctx.run.id, "ended", ctx.lease.owner)
    return {"napped": ctx.payload.get("seconds", 1.0)}


@runqueue.handler("test.stale_turn", start_within=30)
def stale_turn(ctx: RunContext) -> dict:
    """A kind with a default start deadline (tests/database/limits/test_deadlines.py)."""
    return {"ran": True}


@runqueue.handler("test.overrun", max_duration=600)
def overrun(ctx: RunContext) -> dict:
    """Ignores ``ctx.cancelled``: works until the test writes "release"
    (heartbeating through the worker), recording that it started and
    that it ended, and why it was told to stop."""
    ledger(ctx.run.id, "started", ctx.lease.owner)
    wait_for_release(ctx)
    ledger(ctx.run.id, "ended", ctx.lease.cancel_reason)
    return {"overran": True}


# --- forks and usage (tests/workers/test_fork.py, tests/workers/test_usage.py) ------------------


@runqueue.handler("test.steps")
def steps(ctx: RunContext) -> Any:
    """Calls tools step0..step{n-1} in order, each writing the ledger when
    it runs (a replayed step writes nothing), with a spawn of test.echo at
    step ``spawn_at``; raises a PermanentError right after step
    ``fail_after`` (None: never), and ends with what each step returned.
    The tool of step ``tool_fails_at`` raises (the provider is down) until
    the ledger holds ("provider", "up"), and the handler then fails with
    its error: the common dead letter, a tool call that failed."""
    n, fail_after = ctx.payload["steps"], ctx.payload.get("fail_after")
    tool_fails_at = ctx.payload.get("tool_fails_at")
    values = []
    for i in range(n):
        if i == ctx.payload.get("spawn_at"):
            values.append(str(ctx.spawn("test.echo", {"from": i})))
        else:

            def step(i: int, idempotency_key: str) -> dict:
                if i == tool_fails_at and not released("provider", "up"):
                    raise ConnectionError("the provider is down")
                ledger(ctx.run.id, "step", str(i))
                return {"step": i, "key": idempotency_key}

            outcome = ctx.invoke_tool(f"step{i}", step, args={"i": i})
            if outcome.status == "failed" and tool_fails_at is not None:
                raise runqueue.PermanentError(f"step {i} failed: {outcome.error}")
            values.append(outcome.value["step"] if outcome.value else outcome.status)
        if i == fail_after:
            raise runqueue.PermanentError(f"failed after step {i}")
    return {"values": values}


@runqueue.handler("test.usage")
def usage_calls(ctx: RunContext) -> Any:
    """Records each of ``payload["calls"]`` ({"model", "in", "out", "cost"?})
    as a model call; spawns ``payload["children"]`` (test.usage payloads)
    and waits for them first; blocks until released if ``block``."""
    if ctx.state is None and ctx.payload.get("children"):
        for child in ctx.payload["children"]:
            ctx.spawn("test.usage", child)
        return ctx.wait_for_children(state={"joined": True})
    if ctx.payload.get("block"):
        wait_for_release(ctx)
    costs = []
    for call in ctx.payload.get("calls", []):
        cost = ctx.record_usage(
            model=call["model"],
            input_tokens=call["in"],
            output_tokens=call["out"],
            cost=_amount(call.get("cost")),
        )
        costs.append(None if cost is None else str(cost))
    return {"costs": costs}


def _amount(cost: Any) -> Any:
    """A payload's cost: JSON has no decimals, so an exact amount comes as a
    string and is passed as a Decimal (record_usage takes numbers only);
    any other value as it is."""
    from decimal import Decimal, InvalidOperation

    if isinstance(cost, str):
        try:
            return Decimal(cost)
        except InvalidOperation:
            return cost
    return cost


@runqueue.handler("test.async_usage")
async def async_usage_calls(ctx: Any) -> Any:
    """test.usage's calls, recorded at once from an async handler."""
    import asyncio

    calls = ctx.payload.get("calls", [])
    costs = await asyncio.gather(
        *(
            ctx.record_usage(model=c["model"], input_tokens=c["in"], output_tokens=c["out"])
            for c in calls
        )
    )
    return {"costs": [None if c is None else str(c) for c in costs]}


@runqueue.handler("test.wait_event")
def wait_event(ctx: RunContext) -> Any:
    """Waits for inbound event payload["name"] ("paid" by default) whose
    data contains payload["match"] (payload["timeout"] seconds at most),
    then returns what the resume brought."""
    payload = ctx.payload or {}
    if ctx.state is None:
        return ctx.wait_for_event(
            payload.get("name", "paid"),
            match=payload.get("match"),
            timeout=payload.get("timeout"),
            state={"waited": True},
        )
    return {"input": ctx.input, "timed_out": ctx.timed_out}
