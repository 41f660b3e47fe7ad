"""A run's recorded steps (``/api/runs/<id>/steps/``: model requests, tool
calls with their approvals, spawns) and the decision on a tool call awaiting
approval (``/api/runs/<id>/tools/<seq>/decision/``), written by
``runqueue.decide_tool``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

import runqueue
from runqueue.api import parsing
from runqueue.api.auth import Caller
from runqueue.api.endpoint import api_view, mapped, page_after
from runqueue.api.errors import ApiError, not_found, refused_in_status, validation_failed
from runqueue.api.render import run_body, run_route, step_body
from runqueue.api.runs import run_or_404, writable
from runqueue.errors import (
    InvalidArgument,
    InvalidTransition,
    NotAwaitingApproval,
    RunqueueError,
    ToolCallNotFound,
)
from runqueue.models import ToolInvocation, ToolStatus


@api_view("GET", replica=True)
def run_steps(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """A page of the run's recorded steps in order (model requests, tool
    calls with their approvals, spawns); ``next`` continues after the last."""
    run = run_or_404(caller, run_id)
    rows = ToolInvocation.objects.filter(run_id=run.id)
    page, next_url = page_after(
        request, rows, "seq", -1, 2**31 - 1, run_route("run-steps", run.id)
    )
    return JsonResponse({"steps": [step_body(s) for s in page], "next": next_url})


@api_view("POST")
def decide_tool(request: HttpRequest, caller: Caller, run_id: str, seq: str) -> HttpResponse:
    """Decide tool call ``seq`` of a run, which awaits approval (``decision``:
    approve, edit with ``arguments``, reject with a ``reason``, respond
    with a ``result``): 200 with the call and the run. The same decision
    again (a client's retry, with or without its Idempotency-Key) answers
    as the first did, ``Idempotent-Replayed: true``; another is 409."""
    run = writable(caller, run_id)
    if not (seq.isascii() and seq.isdigit() and len(seq) <= 10 and int(seq) < 2**31):
        raise not_found()
    number = int(seq)
    body = parsing.parse_json(request, parsing.read_body(request))
    decision = parsing.tool_decision(body)
    before = ToolInvocation.objects.filter(run_id=run.id, seq=number).first()
    try:
        step = runqueue.decide_tool(run.id, number, actor=caller.principal, **decision)
    except ToolCallNotFound as exc:
        raise not_found() from exc
    except NotAwaitingApproval as exc:
        decided = exc.decision.get("decision") if isinstance(exc.decision, dict) else None
        said = f": it was decided already ({decided})." if decided else "."
        raise ApiError(
            "tool-not-awaiting-approval",
            f"Tool call #{number} does not await approval{said}",
            extensions={"tool_status": exc.status},
        ) from exc
    except InvalidTransition as exc:
        raise refused_in_status("run-finished", exc, "a finished run takes no decision.") from exc
    except InvalidArgument as exc:
        raise validation_failed([{"pointer": f"/{exc.name}", "detail": str(exc)}]) from exc
    except RunqueueError as exc:
        raise mapped(exc) from exc
    run.refresh_from_db()
    response = JsonResponse({"step": step_body(step), "run": run_body(run)})
    if before is not None and before.status != ToolStatus.AWAITING_APPROVAL:
        response["Idempotent-Replayed"] = "true"
    return response
