"""RFC 9457 problem details: one exception type, one map from runqueue's errors.

Every error the API answers is an ``ApiError`` rendered as
``application/problem+json`` with a stable ``type`` URI from ``PROBLEMS``.
Bodies carry no tracebacks, SQL, constraint names or another request's run:
``instance`` (a request id, also logged) is how an operator finds the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from django.http import HttpRequest, JsonResponse

from runqueue.errors import (
    ActiveRunConflict,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidSubmission,
    InvalidTransition,
    RunNotFound,
    SessionQueueFull,
    UnknownKind,
)
from runqueue.submission.rules import unregistered
from runqueue.types import JSON

PROBLEM_BASE = "urn:runqueue:problem:"
PROBLEM_CONTENT_TYPE = "application/problem+json"

#: slug -> (status, title). The slug is the stable part of the ``type`` URI.
PROBLEMS: dict[str, tuple[int, str]] = {
    "malformed-json": (400, "Request body is not valid JSON"),
    "idempotency-key-missing": (400, "Idempotency-Key header is required"),
    "idempotency-key-invalid": (400, "Idempotency-Key header is malformed"),
    "invalid-parameter": (400, "Query parameter is invalid"),
    "unauthenticated": (401, "Authentication required"),
    "event-signature-invalid": (401, "The event's signature does not verify"),
    "csrf-failed": (403, "CSRF verification failed"),
    "run-not-writable": (403, "This run is read-only over the API"),
    "not-found": (404, "Not found"),
    "event-not-accepted": (404, "This event name is not accepted here"),
    "method-not-allowed": (405, "Method not allowed"),
    "session-busy": (409, "Session already has an active run"),
    "session-queue-full": (409, "Session already holds as many pending turns as it may"),
    "idempotency-request-in-progress": (409, "A request with this Idempotency-Key is in progress"),
    "run-not-cancellable": (409, "Run cannot be cancelled"),
    "run-not-signallable": (409, "Run is finished and takes no signal"),
    "run-not-waiting-for-user": (409, "Run does not wait for the user"),
    "tool-not-awaiting-approval": (409, "Tool call does not await approval"),
    "run-finished": (409, "Run is finished"),
    "schedule-limit-reached": (409, "This token owns as many schedules as it may"),
    "length-required": (411, "Content-Length required"),
    "payload-too-large": (413, "Request body is too large"),
    "signal-too-large": (413, "Signal data is too large"),
    "unsupported-media-type": (415, "Unsupported media type"),
    "idempotency-key-reused": (422, "Idempotency-Key already used for a different request"),
    "kind-not-allowed": (422, "This kind cannot be submitted over the API"),
    "priority-not-allowed": (422, "Priority above what this caller may submit"),
    "rate-limited": (429, "Too many writes"),
    "mailbox-full": (429, "The run keeps as many signals as it may"),
    "stream-limit": (429, "Too many open event streams for this caller"),
    "validation-failed": (422, "Request body failed validation"),
    "unavailable": (503, "Service temporarily unavailable"),
    "too-many-streams": (503, "Too many open event streams"),
    "internal-error": (500, "Internal server error"),
    "event-trigger-failed": (500, "A trigger of the event could not start its run"),
}


class FieldError(TypedDict):
    """One validation error: a JSON Pointer (RFC 6901) into the body."""

    pointer: str
    detail: str


class ProblemBody(TypedDict):
    type: str
    title: str
    status: int
    detail: str
    instance: str
    errors: NotRequired[list[FieldError]]


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


@dataclass
class ApiError(Exception):
    """An error answer; raise it anywhere under a view wrapped by ``api_view``."""

    slug: str
    detail: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, JSON] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.slug not in PROBLEMS:
            raise ValueError(f"unknown problem {self.slug!r}")
        super().__init__(self.detail)

    @property
    def status(self) -> int:
        return PROBLEMS[self.slug][0]

    def render(self, request: HttpRequest) -> JsonResponse:
        status, title = PROBLEMS[self.slug]
        body: dict[str, JSON] = {
            "type": problem_type(self.slug),
            "title": title,
            "status": status,
            "detail": self.detail,
            "instance": request_id(request),
        }
        body |= self.extensions
        response = JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE)
        for name, value in self.headers.items():
            response[name] = value
        return response


def request_id(request: HttpRequest) -> str:
    """A per-request id (``urn:uuid:…``) to correlate an answer with server logs."""
    rid = getattr(request, "_runqueue_request_id", None)
    if rid is None:
        rid = f"urn:uuid:{uuid.uuid4()}"
        request._runqueue_request_id = rid  # type: ignore[attr-defined]
    return rid


def not_found(what: str = "run") -> ApiError:
    """The one answer for a run (or schedule) that is missing or in another
    tenant (no oracle)."""
    return ApiError("not-found", f"No {what} with this id.")


def refused_in_status(slug: str, exc: InvalidTransition, rule: str) -> ApiError:
    """A write the run's status refuses: the status it is in, then ``rule``,
    what the write needs."""
    return ApiError(
        slug, f"The run is {exc.status}; {rule}", extensions={"run_status": exc.status}
    )


def validation_failed(errors: list[FieldError]) -> ApiError:
    return ApiError(
        "validation-failed",
        "The request body does not match the schema; see errors.",
        extensions={"errors": errors},
    )


def from_service_error(
    exc: Exception, *, run_url: Callable[[uuid.UUID | None], str]
) -> ApiError | None:
    """Map an exception of ``runqueue.submit``/``cancel`` to its answer, or None.

    ``run_url(run_id)`` renders a run's location. Only the conflicting run of
    a session-busy answer is named: it is in the caller's tenant by the
    session constraint. A reused key never names the other request's run.
    """
    if isinstance(exc, IdempotencyConflict):
        return ApiError(
            "idempotency-key-reused",
            "This key was first used with a different request body. "
            "Use a new key for a new request.",
        )
    if isinstance(exc, IdempotencyInProgress):
        return ApiError(
            "idempotency-request-in-progress",
            "The first request with this key has not finished yet. Retry after a second.",
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, ActiveRunConflict):
        return ApiError(
            "session-busy",
            f"Session {exc.session_id!r} has a {exc.status} run. Wait for it to finish, "
            "answer it when it waits for the user, or send with on_busy (enqueue, "
            "interrupt, rollback or merge).",
            extensions={
                "session_id": exc.session_id,
                "active_run": run_url(exc.run_id),
                "active_run_status": exc.status,
            },
        )
    if isinstance(exc, SessionQueueFull):
        return ApiError(
            "session-queue-full",
            f"Session {exc.session_id!r} already has {exc.limit} turns waiting behind its "
            "active run. Retry once one has run, or send with on_busy merge.",
            headers={"Retry-After": "1"},
            extensions={
                "session_id": exc.session_id,
                "active_run": run_url(exc.run_id),
                "max_pending": exc.limit,
            },
        )
    if isinstance(exc, UnknownKind):
        problem = unregistered(exc.kind)
        return validation_failed([{"pointer": problem.pointer, "detail": problem.detail}])
    if isinstance(exc, InvalidSubmission):
        detail = str(exc).removeprefix(f"{exc.field}: ")
        return validation_failed([{"pointer": f"/{exc.field}", "detail": detail}])
    if isinstance(exc, RunNotFound):
        return not_found()
    if isinstance(exc, InvalidTransition):
        return refused_in_status(
            "run-not-cancellable", exc, "only queued, running or waiting runs can be cancelled."
        )
    return None
