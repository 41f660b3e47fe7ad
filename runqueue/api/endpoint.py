"""What every view of the API shares: ``api_view`` (the method check,
authentication, problem+json for every error, reads from a replica), a
service error mapped to its answer, integer query parameters, a page of a
run's records (events, steps), and what the two event streams (a run's, a
session's) bound and show by caller.

Apart from the views, which are by resource (runs, run_events, steps,
sessions, inbound_events, schedules), so that each imports it from below.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.db import OperationalError
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from runqueue import reads
from runqueue.api.auth import Caller, authenticate
from runqueue.api.errors import ApiError, from_service_error, request_id
from runqueue.api.render import run_url
from runqueue.conf import MAX_EVENTS_PAGE_SIZE, get_settings
from runqueue.errors import RunqueueError
from runqueue.stream import StreamLimit
from runqueue.stream.sse import Stream

logger = logging.getLogger("runqueue.api")

View = Callable[..., HttpResponseBase]


def api_view(*methods: str, replica: bool = False) -> Callable[[View], View]:
    """Method check, authentication and problem+json for every error.

    CSRF is checked in ``authenticate`` for session callers only, so the view
    itself is exempt from the middleware (bearer callers carry no cookie).
    With ``replica`` the view's reads may go to RUNQUEUE["READ_DATABASE"]
    (``from_replica``); the token is verified on the primary either way, so
    a revoked token is refused at once.
    """

    def decorate(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, **kwargs: str) -> HttpResponseBase:
            try:
                if request.method not in methods:
                    raise ApiError(
                        "method-not-allowed",
                        f"Use {' or '.join(methods)}.",
                        headers={"Allow": ", ".join(methods)},
                    )
                caller = authenticate(request)
                if replica:
                    return from_replica(view, request, caller, kwargs)
                return view(request, caller, **kwargs)
            except ApiError as exc:
                return exc.render(request)
            except OperationalError:
                logger.exception("API database error request=%s", request_id(request))
                return ApiError(
                    "unavailable",
                    "The database is unavailable; nothing was done. Retry shortly.",
                    headers={"Retry-After": "1"},
                ).render(request)
            except Exception:
                logger.exception("API error request=%s", request_id(request))
                return ApiError(
                    "internal-error", "Something went wrong; quote the instance id."
                ).render(request)

        return wrapper

    return decorate


def from_replica(
    view: View, request: HttpRequest, caller: Caller, kwargs: dict[str, str]
) -> HttpResponseBase:
    """The view read from the replica (``runqueue.reads``), its answer
    saying how far behind past READ_LAG_WARNING_SECONDS; read again from
    the primary when the replica has no such run or session yet: a client
    reading what it has just submitted. A replica lost mid-read: the
    primary too."""
    with reads.replica_reads() as source:
        try:
            return reads.mark(view(request, caller, **kwargs), source)
        except ApiError as exc:
            if not source.replica or exc.slug != "not-found":
                raise
        except OperationalError:
            if not source.replica:
                raise
            logger.warning("Replica read failed request=%s", request_id(request), exc_info=True)
    return view(request, caller, **kwargs)


def is_operator(caller: Caller) -> bool:
    """A staff member's session: sees a lease's token and its worker's owner
    string in events, which an API token (a tenant's client) does not."""
    return caller.via == "session" and bool(getattr(caller.user, "is_staff", False))


def stream_owners(caller: Caller) -> list[tuple[str, int | None]]:
    """The caller's stream bounds: its token (a session: its user) and its tenant."""
    conf = get_settings()
    who = f"token:{caller.token.pk}" if caller.token is not None else f"token:{caller.principal}"
    return [
        (who, conf.STREAM_MAX_PER_TOKEN),
        (f"tenant:{caller.tenant}", conf.STREAM_MAX_PER_TENANT),
    ]


def stream_limit_error(exc: StreamLimit, what: str) -> ApiError:
    """503 when this process streams all it may, 429 when the caller does."""
    if exc.scope == "process":
        return ApiError(
            "too-many-streams",
            f"This server process streams as many {what} as it may; retry shortly.",
            headers={"Retry-After": "5"},
        )
    return ApiError(
        "stream-limit",
        f"This {exc.scope} already has {exc.limit} open event stream(s) here; close one "
        "or retry shortly.",
        headers={"Retry-After": "5"},
        extensions={"scope": exc.scope, "limit": exc.limit},
    )


def event_stream_response(stream: Stream) -> StreamingHttpResponse:
    """A run's or a session's event stream as the answer: never cached, and
    passed on by a proxy as each event comes."""
    response = StreamingHttpResponse(stream, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def answer_stream(
    caller: Caller,
    what: str,
    open_stream: Callable[[list[tuple[str, int | None]], bool], Stream | None],
) -> HttpResponseBase:
    """The stream ``open_stream(owners, operator)`` opens for ``caller``
    (its bounds, whether it is an operator) as the answer: 503 or 429 past
    a limit (``what`` names what this process streams), 204 when there is
    nothing left to send (a browser's EventSource then stops reconnecting)."""
    try:
        stream = open_stream(stream_owners(caller), is_operator(caller))
    except StreamLimit as exc:
        raise stream_limit_error(exc, what) from None
    if stream is None:
        return HttpResponse(status=204)
    return event_stream_response(stream)


def last_event_id(request: HttpRequest) -> str:
    """The ``Last-Event-ID`` a reconnecting EventSource sends ('' if none)."""
    return (request.headers.get("Last-Event-ID") or "").strip()


def mapped(exc: RunqueueError) -> ApiError:
    mapped = from_service_error(exc, run_url=run_url)
    if mapped is None:
        raise exc
    return mapped


def int_param(request: HttpRequest, name: str, default: int, low: int, high: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    return _int_value(name, raw, low, high)


def _int_value(name: str, raw: str, low: int, high: int) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19 and low <= int(raw) <= high):
        raise ApiError(
            "invalid-parameter",
            f"{name} must be an integer from {low} to {high}.",
            extensions={"parameter": name},
        )
    return int(raw)


def page_after[M: Model](
    request: HttpRequest, rows: QuerySet[M], key: str, first: int, last: int, url: str
) -> tuple[list[M], str | None]:
    """A page of ``rows`` in ``key`` order: those after the ``after`` query
    parameter (from ``first``, its default, to ``last``), ``limit`` of them
    (API_EVENTS_PAGE_SIZE unless asked), and the URL (``url``) of the next
    page, None on the last."""
    after = int_param(request, "after", first, first, last)
    limit = int_param(
        request, "limit", get_settings().API_EVENTS_PAGE_SIZE, 1, MAX_EVENTS_PAGE_SIZE
    )
    page = list(rows.filter(**{f"{key}__gt": after}).order_by(key)[: limit + 1])
    if len(page) <= limit:
        return page, None
    page = page[:limit]
    return page, f"{url}?after={getattr(page[-1], key)}&limit={limit}"
