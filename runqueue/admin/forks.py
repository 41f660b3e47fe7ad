"""Forking a finished run from the admin: "Fork from here" on each step of
a run's page (a confirmation page asking a reason and, optionally, an
edited JSON payload), and the bulk "Fork from failure" on dead-lettered
runs (from the failed tool call: the steps before it kept). Each calls
``runqueue.fork`` (``runqueue.history.forking``), which writes ``run.forked`` on
both runs naming ``staff:<username>``; a LogEntry goes to both runs' admin
history."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from runqueue import events
from runqueue.admin import permissions
from runqueue.admin.actions import PAST, _apply, actor, log_change
from runqueue.admin.display import pretty_json
from runqueue.admin.guard import json_area, reason_field
from runqueue.errors import RunqueueError
from runqueue.history import forking
from runqueue.models import EventLog, Run, ToolInvocation

PAST["fork"] = "forked"


class ForkForm(forms.Form):
    """Why, and the payload the fork runs with (the original's unless edited)."""

    reason = reason_field("Recorded in both runs' event logs.")
    payload = json_area(
        8,
        "The fork's payload; leave it as it is to run with the original's. The "
        "steps kept are replayed as recorded: an edit that changes them fails the fork.",
    )


def view(model_admin: ModelAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """GET ``?step=N`` shows what a fork from step N keeps and runs again;
    POST forks and opens the new run's page."""
    if not permissions.may_fork(request):
        raise PermissionDenied
    run = model_admin.get_object(request, object_id)
    if run is None:
        raise Http404("No such run.")
    steps = list(ToolInvocation.objects.filter(run_id=run.id).order_by("seq"))
    raw = request.GET.get("step", "")
    # A step is at most the number of records (the "Fork from here" after the
    # last): a longer number is no step, whatever its value.
    step = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 10 else -1
    if not 0 <= step <= len(steps):
        raise Http404("No such step.")
    form = ForkForm(
        request.POST if request.method == "POST" else None, initial={"payload": run.payload}
    )
    error = ""
    if request.method == "POST" and form.is_valid():
        payload = form.cleaned_data["payload"]
        try:
            fork = forking.fork(
                run.id,
                from_step=step,
                payload=None if payload == run.payload else payload,
                actor=actor(request),
                reason=form.cleaned_data["reason"],
            )
        except RunqueueError as exc:
            error = str(exc)
        else:
            message = f"Forked from step {step} by {actor(request)}: {form.cleaned_data['reason']}"
            log_change(request, [run, fork], message)
            model_admin.message_user(
                request, f"Forked run {run.id} from step {step}: run {fork.id}.", messages.SUCCESS
            )
            return redirect(reverse("admin:runqueue_run_change", args=[fork.id]))
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": f"Fork run {str(run.id)[:8]} from step {step}?",
        "opts": model_admin.opts,
        "run": run,
        "step": step,
        "kept": [s for s in steps if s.seq < step],
        "again": [s for s in steps if s.seq >= step],
        "payload": pretty_json(run.payload),
        "form": form,
        "error": error,
    }
    return TemplateResponse(request, "admin/runqueue/run/fork.html", context)


def fork_links(run: Run, steps: int) -> list[tuple[int, str]]:
    """(step, URL) of each "Fork from here" on a finished run's page: each
    recorded step, and after the last."""
    url = reverse("admin:runqueue_run_fork", args=[run.id])
    return [(step, f"{url}?step={step}") for step in range(steps + 1)]


#: Steps a fork-from-failure confirmation lists per run, kept and run again each.
PLAN_STEPS = 50


@dataclass(frozen=True, slots=True)
class FailurePlan:
    """What a fork from failure of ``run`` keeps and runs again, for its
    confirmation: ``failed`` is the failed call it runs again (None: no call
    failed, every recorded step is kept)."""

    run: Run
    kept: list[ToolInvocation]
    kept_count: int
    again: list[ToolInvocation]
    again_count: int
    failed: int | None


def failure_plan(run: Run) -> FailurePlan:
    kept, failed = forking.failure_cut(run.id)
    records = ToolInvocation.objects.filter(run_id=run.id).order_by("seq")
    before, after = records.filter(seq__lt=kept), records.filter(seq__gte=kept)
    return FailurePlan(
        run=run,
        kept=list(before[:PLAN_STEPS]),
        kept_count=before.count(),
        again=list(after[:PLAN_STEPS]),
        again_count=after.count(),
        failed=failed,
    )


@admin.action(description="Fork from failure (run the failed call again)", permissions=["fork"])
def fork_from_failure(
    modeladmin: ModelAdmin, request: HttpRequest, queryset: QuerySet
) -> HttpResponse | None:
    """A fork of each dead-lettered run from where it failed
    (``forking.fork_from_failure``): the steps before its failed tool call
    kept, that call and the rest run again. The confirmation lists both per
    run; the message after links each new run."""
    made: list[Run] = []

    def call(run_id: uuid.UUID, reason: str) -> Run:
        fork = forking.fork_from_failure(run_id, actor=actor(request), reason=reason)
        made.append(fork)
        return fork

    response = _apply(modeladmin, request, queryset, verb="fork", call=call, reason_required=True)
    if isinstance(response, TemplateResponse) and response.context_data is not None:
        rows = response.context_data["rows"]
        response.context_data["fork_plans"] = [failure_plan(row.run) for row in rows]
    for fork in made:
        modeladmin.message_user(request, _forked_message(fork), messages.SUCCESS)
    return response


def _forked_message(fork: Run) -> str:
    """Which run was forked, what it kept, and a link to the fork."""
    data = (
        EventLog.objects.filter(run_id=fork.id, type=events.FORKED)
        .values_list("data", flat=True)
        .first()
    ) or {}
    kept, failed = data.get("from_step"), data.get("failed_step")
    what = (
        f"kept the {kept} step(s) before its failed call #{failed}, which runs again"
        if failed is not None
        else f"kept its {kept} recorded step(s)"
    )
    return format_html(
        'Forked run {} from failure ({}): run <a href="{}">{}</a>.',
        fork.forked_from_id,
        what,
        reverse("admin:runqueue_run_change", args=[fork.id]),
        fork.id,
    )
