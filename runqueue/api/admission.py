"""What a caller may write over the API: submit the kinds the project lists
(``RUNQUEUE["API_KINDS"]``), up to its priority ceiling; cancel, signal and
answer runs of those kinds (and the children they spawned); every write
within its token's quota.

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
from runqueue.conf import RESERVED_KIND_PREFIXES, get_settings
from runqueue.models import ApiToken, PriorityClass, Run
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
    admit_kind(args["kind"])
    if "priority" not in body:
        return args | {"priority": int(ceiling(caller))}
    admit_priority(caller, args["priority"])
    return args


def admit_kind(kind: str) -> None:
    """422 ``kind-not-allowed`` unless the API may submit ``kind``."""
    allowed = get_settings().API_KINDS
    if kind not in allowed:
        raise ApiError(
            "kind-not-allowed",
            f"Kind {kind!r} cannot be submitted over the API.",
            extensions={"allowed_kinds": list(allowed)},
        )


def admit_priority(caller: Caller, priority: int) -> None:
    """422 ``priority-not-allowed`` above the caller's ceiling."""
    top = ceiling(caller)
    if PriorityClass.of(priority) < top:
        name = top.slug
        raise ApiError(
            "priority-not-allowed",
            f"This caller may submit to the {name} class or lower "
            f"(priority {int(top)} or more), not priority {priority}.",
            extensions={"max_priority_class": name, "min_priority": int(top)},
        )


def may_write(run: Run) -> None:
    """403 ``run-not-writable`` unless the API may act on ``run``: a kind it
    may submit (``API_KINDS``), or a child a run spawned (its kind chosen by
    a handler), never a reserved kind (runqueue's own jobs, django.tasks).
    A run the project submitted from Python of another kind stays
    read-only over the API: the caller's tenant alone does not make it the
    caller's to cancel or resume."""
    kind = run.kind
    if kind.startswith(RESERVED_KIND_PREFIXES):
        allowed = False
    else:
        allowed = kind in get_settings().API_KINDS or run.parent_id is not None
    if not allowed:
        raise ApiError(
            "run-not-writable",
            f"Runs of kind {kind!r} are read-only over the API: only runs of the kinds it "
            "may submit (and the children they spawn) can be cancelled, signalled or answered.",
            extensions={"kind": kind},
        )


def take_quota(caller: Caller) -> None:
    """Count one write (a submit, cancel, signal or answer) against the
    token's quota; 429 ``rate-limited`` with ``Retry-After`` once it is used
    up (kept in PostgreSQL: every web process shares it). A quota of 0
    refuses every write."""
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
        f"This token may make {token.submit_quota} writes (submits, cancels, signals, "
        f"answers) per {token.submit_window_seconds} s; retry in {seconds} s.",
        headers={"Retry-After": str(seconds)},
        extensions={
            "quota": token.submit_quota,
            "window_seconds": token.submit_window_seconds,
        },
    )
