"""Forking a finished run from the admin: "Fork from here" on each step of
a run's page (a confirmation page asking a reason and, optionally, an
edited JSON payload), and the bulk "Fork from failure" on dead-lettered
runs. Each calls ``runqueue.fork`` (``runqueue.forking``), which writes
``run.forked`` on both runs naming ``staff:<username>``; a LogEntry goes
to both runs' admin history."""

from __future__ import annotations

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

from runqueue import forking
from runqueue.admin import permissions
from runqueue.admin.actions import PAST, _apply, actor, log_change
from runqueue.admin.display import pretty_json
from runqueue.admin.guard import StorableJSONField
from runqueue.errors import RunqueueError
from runqueue.limits import REASON_MAX_LENGTH
from runqueue.models import Run, ToolInvocation

PAST["fork"] = "forked"


class ForkForm(forms.Form):
    """Why, and the payload the fork runs with (the original's unless edited)."""

    reason = forms.CharField(
        max_length=REASON_MAX_LENGTH,
        widget=forms.TextInput(attrs={"size": 80}),
        help_text="Recorded in both runs' event logs.",
    )
    payload = StorableJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80}),
        help_text="The fork's payload; leave it as it is to run with the original's. The "
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


@admin.action(description="Fork from failure (keep every recorded step)", permissions=["fork"])
def fork_from_failure(
    modeladmin: ModelAdmin, request: HttpRequest, queryset: QuerySet
) -> HttpResponse | None:
    """A fork of each dead-lettered run that keeps all its recorded steps
    (``leases.fork_from_failure``): it runs again from after its last one."""
    return _apply(
        modeladmin,
        request,
        queryset,
        verb="fork",
        call=lambda run_id, reason: forking.fork_from_failure(
            run_id, actor=actor(request), reason=reason
        ),
        reason_required=True,
    )
