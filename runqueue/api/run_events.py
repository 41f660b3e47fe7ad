"""A run's events: a page of them (``/api/runs/<id>/events/``) and their
Server-Sent Events stream (``/api/runs/<id>/stream/``), both read in the
caller's tenant. The stream itself is ``runqueue.stream``'s."""

from __future__ import annotations

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
)

from runqueue import events
from runqueue.api.auth import Caller
from runqueue.api.endpoint import (
    answer_stream,
    api_view,
    int_param,
    is_operator,
    last_event_id,
    page_after,
)
from runqueue.api.errors import ApiError
from runqueue.api.render import run_route
from runqueue.api.runs import run_or_404
from runqueue.models import EventLog
from runqueue.stream import open_stream
from runqueue.stream.sse import parse_cursor


@api_view("GET", replica=True)
def run_events(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponse:
    """A page of the run's events, oldest first; ``next`` continues after the last."""
    run = run_or_404(caller, run_id)
    rows = EventLog.objects.filter(run_id=run.id)
    page, next_url = page_after(request, rows, "id", 0, 2**63 - 1, run_route("run-events", run.id))
    operator = is_operator(caller)
    return JsonResponse(
        {"events": [events.event_body(e, operator=operator) for e in page], "next": next_url}
    )


@api_view("GET")
def run_stream(request: HttpRequest, caller: Caller, run_id: str) -> HttpResponseBase:
    """Server-Sent Events: the run's events after ``Last-Event-ID`` (or
    ``?after=``), then each new one as it commits, until a terminal event."""
    run = run_or_404(caller, run_id)
    header = last_event_id(request)
    mark = None
    if header:
        try:
            after, mark = parse_cursor(header)
        except ValueError as exc:
            raise ApiError(
                "invalid-parameter",
                f"Last-Event-ID must be an id: of this stream ({exc}).",
                extensions={"parameter": "Last-Event-ID"},
            ) from None
    else:
        after = int_param(request, "after", 0, 0, 2**63 - 1)
    # None (204): finished, and the client has every event.
    return answer_stream(
        caller,
        "runs",
        lambda owners, operator: open_stream(run, after, owners, mark=mark, operator=operator),
    )
