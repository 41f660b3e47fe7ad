"""A session of the caller's tenant: its turns, line and usage
(``/api/sessions/<id>/``, read by ``runqueue.session``) and every turn's
events on one stream (``/api/sessions/<id>/stream/``,
``runqueue.stream.session``). Another tenant's session is a missing one."""

from __future__ import annotations

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
)

from runqueue.api.auth import Caller
from runqueue.api.endpoint import answer_stream, api_view, int_param, last_event_id
from runqueue.api.errors import ApiError, not_found
from runqueue.api.render import session_body
from runqueue.errors import InvalidArgument
from runqueue.models import Run
from runqueue.reads import sessions
from runqueue.stream.hub import process_hub
from runqueue.stream.session import open_session_stream, parse_session_cursor


@api_view("GET", replica=True)
def get_session(request: HttpRequest, caller: Caller, session_id: str) -> HttpResponse:
    """A session of the caller's tenant (``runqueue.session``): its newest
    turns (``limit``) or those before ``before`` (the cursor in the previous
    page's ``links.older``), its line and usage; another tenant's is 404."""
    limit = int_param(request, "limit", sessions.DEFAULT_LIMIT, 1, sessions.MAX_LIMIT)
    before = request.GET.get("before")
    try:
        read = sessions.session(session_id, tenant=caller.tenant, limit=limit, before=before)
    except InvalidArgument as exc:
        raise ApiError(
            "invalid-parameter",
            "before must be the cursor in a page's links.older.",
            extensions={"parameter": exc.name},
        ) from None
    if read is None:
        raise not_found()
    return JsonResponse(session_body(read, limit))


@api_view("GET")
def session_stream(request: HttpRequest, caller: Caller, session_id: str) -> HttpResponseBase:
    """Server-Sent Events: every turn's events of a session of the caller's
    tenant, in order, each naming its run; after ``Last-Event-ID`` (or
    ``?after=``, the same cursor) across turns, then each new one as it
    commits, the next turns' too (``runqueue.stream.session``)."""
    if sessions.session_unstorable(session_id) or not (
        Run.objects.filter(tenant=caller.tenant, session_id=session_id).exists()
    ):
        raise not_found()
    header = last_event_id(request)
    raw, name = (header, "Last-Event-ID") if header else (request.GET.get("after"), "after")
    cursor = None
    if raw:
        try:
            cursor = parse_session_cursor(raw)
        except ValueError as exc:
            raise ApiError(
                "invalid-parameter",
                f"{name} must be an id of this stream ({exc}).",
                extensions={"parameter": name},
            ) from None
    return answer_stream(
        caller,
        "runs and sessions",
        lambda owners, operator: open_session_stream(
            process_hub(), caller.tenant, session_id, cursor, owners, operator=operator
        ),
    )
