"""Admin actions: requeue and cancel, each confirmed, permitted and audited.

An action holds no queue logic. It confirms on an intermediate page (with a
reason), calls the service layer per run, and reports through
``message_user``. Every change is audited twice: the service writes the run
event naming ``staff:<username>``, and a LogEntry goes to the admin history.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

import runqueue
from runqueue import leases
from runqueue.admin import tree
from runqueue.errors import (
    LEASE_EXPIRED,
    PERMANENT,
    TRANSIENT,
    ActiveRunConflict,
    InvalidTransition,
    RunNotFound,
    RunqueueError,
)
from runqueue.models import Run, RunStatus

#: Past tense of each action's verb, for messages and the audit.
PAST = {"requeue": "requeued", "cancel": "cancelled", "pause": "paused", "resume": "resumed"}

#: Runs one action may change: a support action, not a bulk migration tool.
MAX_ACTION_RUNS = 100


def actor(request: HttpRequest) -> str:
    """The actor recorded in run events for a staff member's action."""
    return f"staff:{request.user.get_username()}"


def staff_id(request: HttpRequest) -> int | str | uuid.UUID:
    """The primary key of the staff member behind an admin request, for LogEntry.

    The admin serves staff only, so the user is never anonymous here.
    """
    pk = request.user.pk
    assert pk is not None, "an admin request without a logged-in user"
    return pk


def log_change(request: HttpRequest, runs: Iterable[Run], message: str) -> None:
    """The admin-history half of the audit: one LogEntry per changed run."""
    runs = list(runs)
    if runs:
        LogEntry.objects.log_actions(staff_id(request), runs, CHANGE, message)


def explain(exc: RunqueueError, verb: str, run_id: uuid.UUID) -> str:
    """What staff should read when the service layer refuses."""
    if isinstance(exc, ActiveRunConflict):
        return (
            f"Run {run_id} was not {PAST[verb]}: its session {exc.session_id!r} already has an "
            f"active run {exc.run_id} ({exc.status}). Finish or cancel that run first."
        )
    if isinstance(exc, InvalidTransition):
        return f"Run {run_id} was not {PAST[verb]}: it is {exc.status}."
    if isinstance(exc, RunNotFound):
        return f"Run {run_id} was not {PAST[verb]}: it no longer exists."
    return f"Run {run_id} was not {PAST[verb]}: {exc}"


#: What a requeue will do, by how the run failed (docs/decisions/admin-api.md, "Pages,
#: lists and confirmations").
REQUEUE_NOTES = {
    PERMANENT: (
        "Failed permanently: a requeue runs the same handler code on the same input "
        "(payload, delivered input, last checkpoint) and replays the tool calls already "
        "recorded."
    ),
    TRANSIENT: (
        "It failed with a transient error on every attempt. Requeueing gives it a fresh "
        "attempt budget: check that the cause (a provider outage, a rate limit) has cleared."
    ),
    LEASE_EXPIRED: (
        "Its worker stopped renewing the lease (a crash, a kill, a freeze) on every attempt. "
        "Requeueing runs it again from its last checkpoint."
    ),
}


@dataclass(frozen=True, slots=True)
class ConfirmRow:
    """A run on an action's confirmation page, with its failure for a requeue."""

    run: Run
    failure: str
    classification: str
    attempts: str
    note: str
    warn: bool


def confirm_row(run: Run) -> ConfirmRow:
    """The failure (type, message, attempts) and what requeueing it will do."""
    failure = run.failure or {}
    classification = failure.get("classification") or ""
    attempt = failure.get("attempt") or run.attempts
    return ConfirmRow(
        run=run,
        failure=(
            f"{failure.get('error_type') or 'error'}: {failure.get('message') or ''}"
            if failure
            else ""
        ),
        classification=classification,
        attempts=f"{attempt} of {run.max_attempts}",
        note=REQUEUE_NOTES.get(classification, "") if run.status == RunStatus.FAILED else "",
        warn=run.status == RunStatus.FAILED and classification == PERMANENT,
    )


def _apply(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet,
    *,
    verb: str,
    call: Callable[[uuid.UUID, str], Run],
    reason_required: bool,
) -> HttpResponse | None:
    """Confirm, then run ``call(run_id, reason)`` per run and report."""
    run_ids = list(queryset.order_by().values_list("pk", flat=True)[: MAX_ACTION_RUNS + 1])
    if len(run_ids) > MAX_ACTION_RUNS:
        modeladmin.message_user(
            request,
            f"Select at most {MAX_ACTION_RUNS} runs to {verb}; narrow the filters.",
            messages.WARNING,
        )
        return None
    reason = request.POST.get("reason", "").strip()
    if request.POST.get("confirm") != "yes" or (reason_required and not reason):
        return _confirm_page(modeladmin, request, run_ids, verb, reason_required)
    done: list[Run] = []
    for run_id in run_ids:
        try:
            done.append(call(run_id, reason))
        except RunqueueError as exc:
            modeladmin.message_user(request, explain(exc, verb, run_id), messages.ERROR)
    message = f"{PAST[verb].capitalize()} by {actor(request)}" + (f": {reason}" if reason else "")
    log_change(request, done, message)
    if done:
        modeladmin.message_user(
            request, f"{PAST[verb].capitalize()} {len(done)} run(s).", messages.SUCCESS
        )
    return None


def _confirm_page(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    run_ids: list[uuid.UUID],
    verb: str,
    reason_required: bool,
) -> TemplateResponse:
    opts = modeladmin.model._meta
    runs = Run.objects.filter(pk__in=run_ids).order_by("-created_at")
    rows = [confirm_row(run) for run in runs]
    # A cancel cascades (runqueue.cancel): the page names every run below
    # the selected ones that it would cancel too.
    below, more_below = tree.active_descendants(list(run_ids)) if verb == "cancel" else ([], False)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{verb.capitalize()} {len(run_ids) + len(below)}{'+' if more_below else ''} "
        "run(s)?",
        "descendants": below,
        "more_descendants": more_below,
        "descendants_limit": tree.DESCENDANTS_LIMIT,
        "running_descendants": sum(r.status == RunStatus.RUNNING for r in below),
        "opts": opts,
        "verb": verb,
        "action": request.POST.get("action", ""),
        "rows": rows,
        "permanent": sum(row.warn for row in rows),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "reason_required": reason_required,
        "missing_reason": request.POST.get("confirm") == "yes",
        "reason": request.POST.get("reason", ""),
    }
    return TemplateResponse(request, "admin/runqueue/run/confirm_action.html", context)


Action = Callable[[admin.ModelAdmin, HttpRequest, QuerySet], HttpResponse | None]
Change = Callable[[uuid.UUID, str, str], object]


def _run_action(
    description: str, *, permission: str, reason_required: bool = False
) -> Callable[[Change], Action]:
    """Make ``<verb>_runs(run_id, actor, reason)``, the change to one run,
    the admin action of that name: confirmed, then the change per run
    (``_apply``), reporting the run it returns (a pause or resume returns
    ids: the row is read again). The four actions differ only in these."""

    def make(change: Change) -> Action:
        verb = change.__name__.removesuffix("_runs")

        def action(
            modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
        ) -> HttpResponse | None:
            def call(run_id: uuid.UUID, reason: str) -> Run:
                changed = change(run_id, actor(request), reason)
                return changed if isinstance(changed, Run) else Run.objects.get(id=run_id)

            return _apply(
                modeladmin,
                request,
                queryset,
                verb=verb,
                call=call,
                reason_required=reason_required,
            )

        # The admin names an action by its function's name (POST "action").
        action.__name__ = action.__qualname__ = change.__name__
        action.__doc__ = change.__doc__
        return admin.action(description=description, permissions=[permission])(action)

    return make


@_run_action("Requeue selected dead-lettered runs", permission="requeue")
def requeue_runs(run_id: uuid.UUID, who: str, reason: str) -> object:
    """Dead-lettered -> queued with a fresh attempt budget (leases.requeue)."""
    return leases.requeue(run_id, actor=who, reason=reason)


@_run_action("Cancel selected runs", permission="cancel", reason_required=True)
def cancel_runs(run_id: uuid.UUID, who: str, reason: str) -> object:
    """Cancel; the epoch bump fences a worker still running the run."""
    return runqueue.cancel(run_id, reason=reason, actor=who)


@_run_action("Pause selected runs", permission="pause")
def pause_runs(run_id: uuid.UUID, who: str, reason: str) -> object:
    """Pause (runqueue.pause_run): not claimed until resumed; a running
    one is given back at its handler's next step."""
    return runqueue.pause_run(run_id, actor=who, reason=reason)


@_run_action("Resume selected paused runs", permission="pause")
def resume_runs(run_id: uuid.UUID, who: str, reason: str) -> object:
    """Resume what a pause paused (runqueue.resume_run)."""
    return runqueue.resume_run(run_id, actor=who, reason=reason)
