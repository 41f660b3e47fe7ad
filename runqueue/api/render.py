"""JSON representations of runs and events, as the API shows them.

A failure shows its classification, error type and message: the traceback
stays in the database and the admin. An event's body is
``runqueue.events.event_body`` (the event stream sends the same).
"""

from __future__ import annotations

import uuid
from typing import NotRequired, TypedDict
from urllib.parse import urlencode

from django.urls import reverse

from runqueue import events
from runqueue.events import public_time
from runqueue.history import usage
from runqueue.leases import SPAWN_TOOL
from runqueue.leases.turns import turn_payloads
from runqueue.models import (
    WAIT_STATUSES,
    PriorityClass,
    Run,
    RunEvent,
    RunStatus,
    ToolInvocation,
    ToolStatus,
)
from runqueue.reads import sessions
from runqueue.runtime.tools import MODEL_STEP_PREFIX, PATCH_TOOL
from runqueue.types import JSON


class FailureBody(TypedDict):
    classification: str | None
    error_type: str | None
    message: str | None
    attempt: int | None


class UsageBody(TypedDict):
    """Model calls recorded (``ctx.record_usage``): tokens each way, the
    cost of those with one (a decimal string), how many calls, and how many
    had no cost."""

    input_tokens: int
    output_tokens: int
    cost: str
    calls: int
    unpriced_calls: int


class RunLinks(TypedDict):
    self: str
    events: str
    stream: str
    cancel: str
    pause: str
    resume: str
    #: What the run did, step by step: model requests and tool calls.
    steps: str
    #: Where to answer, while the run waits for the user.
    input: NotRequired[str]


class WaitBody(TypedDict):
    reason: str
    name: str
    since: str | None
    until: str | None
    #: What ``ctx.ask_user`` asked, while the run waits for the user; else None.
    question: JSON
    #: An event wait's match (reason event); null otherwise.
    match: JSON


class SessionTurn(TypedDict):
    id: str
    status: str
    place: int | None


class SessionLine(TypedDict):
    """A session's line now: its active run, then its pending turns in the
    order they will be queued (docs/decisions/sessions.md, "Busy sessions")."""

    active: SessionTurn | None
    pending: list[SessionTurn]


class RunBody(TypedDict):
    id: str
    kind: str
    status: str
    parent_id: str | None
    #: The run this one was forked from, and the runs forked from this one.
    forked_from: str | None
    forks: list[str]
    children_open: int
    #: The version of its kind's handler the run is pinned to (first claim's).
    handler_version: int | None
    wait: WaitBody | None
    timed_out: bool
    session_id: str | None
    #: A pending turn's place in its session's line (kept once promoted).
    place: int | None
    #: The run this one interrupted (on_busy "interrupt").
    interrupted_id: str | None
    session: SessionLine | None
    concurrency_key: str
    priority: int
    priority_class: str
    payload: JSON
    #: When runqueue.pause_run paused it (null: not paused).
    paused_at: str | None
    #: The messages of the turn, in order: several when a merge joined them.
    payloads: list[JSON]
    input: JSON
    result: JSON
    failure: FailureBody | None
    attempts: int
    max_attempts: int
    scheduled_for: str | None
    start_by: str | None
    max_duration: float | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    #: What this run recorded, and what its whole tree did (with its cap).
    usage: UsageBody
    tree_usage: UsageBody
    spend_cap: str | None
    links: RunLinks


def run_route(route: str, run_id: uuid.UUID | None, **more: object) -> str:
    """The URL of the run's route ``runqueue-api:<route>`` (``run``,
    ``run-events``, ``run-cancel``...); ``more``: the route's other
    parameters (a tool call's ``seq``)."""
    return reverse(f"runqueue-api:{route}", kwargs={"run_id": str(run_id), **more})


def run_url(run_id: uuid.UUID | None) -> str:
    return run_route("run", run_id)


class StepBody(TypedDict):
    """One recorded step of a run: a model request (``kind`` "model", its
    result a ``model_response`` record: ``runqueue.contrib.steps``), a tool
    call, a spawn or a patch decision."""

    seq: int
    kind: str
    tool: str
    status: str
    idempotency: str
    arguments: JSON
    result: JSON
    error: JSON
    #: For a call made with ``approval``: what was asked, and the decision.
    approval: JSON
    resolution: JSON
    created_at: str | None
    finished_at: str | None
    #: Where to decide it, while it awaits approval.
    decision: NotRequired[str]


def step_kind(tool: str) -> str:
    if tool.startswith(MODEL_STEP_PREFIX):
        return "model"
    if tool == SPAWN_TOOL:
        return "spawn"
    if tool == PATCH_TOOL:
        return "patch"
    return "tool"


def step_body(step: ToolInvocation) -> StepBody:
    body: StepBody = {
        "seq": step.seq,
        "kind": step_kind(step.tool),
        "tool": step.tool,
        "status": step.status,
        "idempotency": step.idempotency,
        "arguments": step.arguments,
        "result": step.result,
        "error": step.error,
        "approval": step.approval,
        "resolution": step.resolution,
        "created_at": public_time(step.created_at),
        "finished_at": public_time(step.finished_at),
    }
    if step.status == ToolStatus.AWAITING_APPROVAL:
        body["decision"] = run_route("run-tool-decision", step.run_id, seq=step.seq)
    return body


def question(run: Run) -> JSON:
    """What the run asked the user, if it waits for the user: its latest
    ``run.waiting`` event's (the question is kept in the event log only),
    read backwards through the run's events index."""
    if run.status != RunStatus.WAITING_FOR_USER:
        return None
    data = (
        RunEvent.objects.filter(run_id=run.id, type=events.WAITING)
        .order_by("-id")
        .values_list("data", flat=True)
        .first()
    )
    return data.get("question") if isinstance(data, dict) else None


def wait_body(run: Run) -> WaitBody | None:
    """What a waiting run waits for, since and until when (and the question
    a run waiting for the user asked); None if it does not wait."""
    if run.status not in WAIT_STATUSES:
        return None
    return {
        "reason": run.wait_reason,
        "name": run.wait_name,
        "since": public_time(run.waiting_since),
        "until": public_time(run.wait_until),
        "question": question(run),
        "match": run.wait_match,
    }


#: The forks a run's body lists at most (newest first).
FORKS_LISTED = 100


def usage_body(totals: usage.Totals) -> UsageBody:
    return {
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cost": usage.text(totals.cost),
        "calls": totals.calls,
        "unpriced_calls": totals.unpriced_calls,
    }


def forks_of(run: Run) -> list[str]:
    forks = Run.objects.filter(forked_from_id=run.id).order_by("-created_at")
    return [str(i) for i in forks.values_list("id", flat=True)[:FORKS_LISTED]]


#: A run's body lists at most this many pending turns of its session.
LINE_LIMIT = 100


def session_line(run: Run) -> SessionLine | None:
    """The run's session's line now (None for a run in no session)."""
    if run.session_id is None:
        return None
    rows = Run.objects.session_line(run.tenant, run.session_id).values_list(
        "id", "status", "place"
    )[: LINE_LIMIT + 1]
    turns = [SessionTurn(id=str(i), status=st, place=p) for i, st, p in rows]
    active = turns[0] if turns and turns[0]["status"] != RunStatus.PENDING else None
    pending = [t for t in turns if t["status"] == RunStatus.PENDING]
    return {"active": active, "pending": pending[:LINE_LIMIT]}


def run_body(run: Run) -> RunBody:
    failure = None
    if run.failure:
        failure = FailureBody(
            classification=run.failure.get("classification"),
            error_type=run.failure.get("error_type"),
            message=run.failure.get("message"),
            attempt=run.failure.get("attempt"),
        )
    links: RunLinks = {
        "self": run_url(run.id),
        "events": run_route("run-events", run.id),
        "stream": run_route("run-stream", run.id),
        "cancel": run_route("run-cancel", run.id),
        "pause": run_route("run-pause", run.id),
        "resume": run_route("run-resume", run.id),
        "steps": run_route("run-steps", run.id),
    }
    if run.status == RunStatus.WAITING_FOR_USER:
        links["input"] = run_route("run-input", run.id)
    tree = usage.tree_of(run.id)
    return {
        "id": str(run.id),
        "kind": run.kind,
        "status": run.status,
        "parent_id": str(run.parent_id) if run.parent_id else None,
        "forked_from": str(run.forked_from_id) if run.forked_from_id else None,
        "forks": forks_of(run),
        "children_open": run.children_open,
        "handler_version": run.handler_version,
        "wait": wait_body(run),
        "timed_out": run.timed_out,
        "session_id": run.session_id,
        "place": run.place,
        "interrupted_id": str(run.interrupted_id) if run.interrupted_id else None,
        "session": session_line(run),
        "concurrency_key": run.concurrency_key,
        "priority": run.priority,
        "priority_class": PriorityClass.of(run.priority).slug,
        "payload": run.payload,
        "payloads": turn_payloads(run),
        "input": run.input,
        "result": run.result,
        "failure": failure,
        "attempts": run.attempts,
        "max_attempts": run.max_attempts,
        "scheduled_for": public_time(run.scheduled_for),
        "start_by": public_time(run.start_by),
        "paused_at": public_time(run.paused_at),
        "max_duration": run.max_duration,
        "created_at": public_time(run.created_at),
        "started_at": public_time(run.started_at),
        "finished_at": public_time(run.finished_at),
        "usage": usage_body(usage.run_totals(run.id)),
        "tree_usage": usage_body(tree.totals),
        "spend_cap": usage.text(tree.spend_cap) if tree.spend_cap is not None else None,
        "links": links,
    }


# -- a session (GET /api/sessions/<id>/) --------------------------------------


class EndingBody(TypedDict):
    """How a finished turn ended: its status, and why (a cancel's reason:
    ``interrupted``, ``rolled_back``, ``expired`` or the canceller's; a
    failure's classification), the turn that interrupted it, who cancelled."""

    status: str
    reason: str | None
    by: str | None
    actor: str | None


class TurnLinks(TypedDict):
    run: str


class TurnBody(TypedDict):
    id: str
    kind: str
    status: str
    place: int | None
    #: What was sent, in order: a merged turn's payloads, or its one payload.
    payloads: list[JSON]
    result: JSON
    ended: EndingBody | None
    interrupted_id: str | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    links: TurnLinks


class SessionLinks(TypedDict):
    self: str
    stream: str
    #: The page of the turns before these (None: these start at the first).
    older: str | None


class SessionBody(TypedDict):
    session_id: str
    #: The newest turns of the page, oldest first.
    turns: list[TurnBody]
    active: TurnBody | None
    pending: list[TurnBody]
    pending_more: bool
    usage: UsageBody
    links: SessionLinks


def session_url(session_id: str) -> str:
    return reverse("runqueue-api:session", kwargs={"session_id": session_id})


def session_stream_url(session_id: str) -> str:
    return reverse("runqueue-api:session-stream", kwargs={"session_id": session_id})


def turn_body(turn: sessions.Turn) -> TurnBody:
    ended = turn.ended
    return {
        "id": str(turn.id),
        "kind": turn.kind,
        "status": turn.status,
        "place": turn.place,
        "payloads": turn.payloads,
        "result": turn.result,
        "ended": None
        if ended is None
        else {
            "status": ended.status,
            "reason": ended.reason,
            "by": str(ended.by) if ended.by else None,
            "actor": ended.actor,
        },
        "interrupted_id": str(turn.interrupted_id) if turn.interrupted_id else None,
        "created_at": public_time(turn.created_at),
        "started_at": public_time(turn.started_at),
        "finished_at": public_time(turn.finished_at),
        "links": {"run": run_url(turn.id)},
    }


def session_body(read: sessions.Session, limit: int) -> SessionBody:
    url = session_url(read.session_id)
    older = f"{url}?{urlencode({'before': read.older, 'limit': limit})}" if read.older else None
    return {
        "session_id": read.session_id,
        "turns": [turn_body(t) for t in read.turns],
        "active": turn_body(read.active) if read.active is not None else None,
        "pending": [turn_body(t) for t in read.pending],
        "pending_more": read.pending_more,
        "usage": usage_body(read.usage),
        "links": {"self": url, "stream": session_stream_url(read.session_id), "older": older},
    }
