"""What a caller may submit over the API: the kinds the project lists
(``RUNQUEUE["API_KINDS"]``), up to its priority ceiling, within its quota.

Checked after authentication, never by the service layer: Python callers
submit any registered kind at any priority. A token's ceiling and quota are
set per token in the admin; a browser session's ceiling is
``RUNQUEUE["API_SESSION_MAX_PRIORITY_CLASS"]`` and it has no quota.
"""

from __future__ import annotations

import math

from django.db import connection

from runqueue.api.auth import Caller
from runqueue.api.errors import ApiError
from runqueue.api.parsing import SubmitArgs
from runqueue.conf import get_settings
from runqueue.models import ApiToken, PriorityClass
from runqueue.sql import execute
from runqueue.types import JSON


def ceiling(caller: Caller) -> PriorityClass:
    """The most urgent class this caller may submit to."""
    if caller.token is not None:
        return PriorityClass(caller.token.max_priority_class)
    return PriorityClass.by_index(get_settings().API_SESSION_MAX_PRIORITY_CLASS)


def admit(caller: Caller, body: dict[str, JSON], args: SubmitArgs) -> SubmitArgs:
    """The checked submit arguments, or 422 ``kind-not-allowed`` /
    ``priority-not-allowed``. A body without a priority gets the caller's
    ceiling: the most urgent class it may use."""
    allowed = get_settings().API_KINDS
    if args["kind"] not in allowed:
        raise ApiError(
            "kind-not-allowed",
            f"Kind {args['kind']!r} cannot be submitted over the API.",
            extensions={"allowed_kinds": list(allowed)},
        )
    top = ceiling(caller)
    if "priority" not in body:
        return args | {"priority": int(top)}
    if PriorityClass.of(args["priority"]) < top:
        name = top.slug
        raise ApiError(
            "priority-not-allowed",
            f"This caller may submit to the {name} class or lower "
            f"(priority {int(top)} or more), not priority {args['priority']}.",
            extensions={"max_priority_class": name, "min_priority": int(top)},
        )
    return args


def take_quota(caller: Caller) -> None:
    """Count one submit against the token's quota; 429 ``rate-limited`` with
    ``Retry-After`` once it is used up (kept in PostgreSQL: every web process
    shares it)."""
    token = caller.token
    if token is None or token.submit_quota is None:
        return
    window = float(token.submit_window_seconds)
    if token.submit_quota == 0:
        raise _limited(token, window)
    params = {"token_id": token.pk, "interval": window / token.submit_quota, "window": window}
    with connection.cursor() as cursor:
        admitted, retry_after = execute(cursor, "take_submit_quota", params).fetchone()
    if not admitted:
        raise _limited(token, float(retry_after))


def _limited(token: ApiToken, retry_after: float) -> ApiError:
    seconds = max(1, math.ceil(retry_after))
    return ApiError(
        "rate-limited",
        f"This token may submit {token.submit_quota} runs per "
        f"{token.submit_window_seconds} s; retry in {seconds} s.",
        headers={"Retry-After": str(seconds)},
        extensions={
            "quota": token.submit_quota,
            "window_seconds": token.submit_window_seconds,
        },
    )
