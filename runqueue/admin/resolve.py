"""Resolving an uncertain tool invocation: did the side effect happen?

A small form (happened / did not happen, and a note saying how staff know)
on a CSRF-protected admin page. The answer goes through
``leases.resolve_uncertain``, which records it and the ``tool.resolved``
event; a LogEntry goes to the run's admin history.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from runqueue import leases
from runqueue.admin import permissions
from runqueue.admin.actions import actor, log_change
from runqueue.admin.display import pretty_json
from runqueue.errors import InvalidTransition
from runqueue.models import ToolInvocation


class ResolveForm(forms.Form):
    """The operator's answer; the note is required: it is the evidence."""

    happened = forms.TypedChoiceField(
        label="Did it happen?",
        choices=[("yes", "It happened"), ("no", "It did not happen")],
        coerce=lambda value: value == "yes",
        widget=forms.RadioSelect,
    )
    note = forms.CharField(
        label="How do you know?",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="e.g. 'charge ch_123 seen in the payment provider's dashboard'.",
    )


def view(model_admin: ModelAdmin, request: HttpRequest, tool_id: int) -> HttpResponse:
    """GET shows the invocation and the form; POST records the answer.
    ``model_admin`` is the run admin the page belongs to (its site, its messages)."""
    if not permissions.may_resolve(request):
        raise PermissionDenied
    tool = get_object_or_404(ToolInvocation.objects.select_related("run"), pk=tool_id)
    form = ResolveForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        happened, note = form.cleaned_data["happened"], form.cleaned_data["note"]
        try:
            leases.resolve_uncertain(tool.pk, happened=happened, note=note, actor=actor(request))
        except InvalidTransition:
            model_admin.message_user(
                request,
                f"{tool.tool} #{tool.seq} of run {tool.run_id} is not awaiting an answer "
                "(already resolved, or not uncertain).",
                messages.ERROR,
            )
        else:
            answer = "happened" if happened else "did not happen"
            log_change(
                request,
                [tool.run],
                f"Resolved uncertain {tool.tool} #{tool.seq} as '{answer}' by "
                f"{actor(request)}: {note}",
            )
            model_admin.message_user(
                request,
                f"Recorded: {tool.tool} #{tool.seq} of run {tool.run_id} {answer}.",
                messages.SUCCESS,
            )
        return redirect(reverse("admin:runqueue_uncertainrun_changelist"))
    context: dict[str, object] = {
        **model_admin.admin_site.each_context(request),
        "title": f"Resolve uncertain {tool.tool} #{tool.seq}",
        "opts": model_admin.opts,
        "tool": tool,
        "arguments": pretty_json(tool.arguments),
        "error": pretty_json(tool.error),
        "form": form,
        "resolvable": tool.status == "uncertain" and tool.resolution is None,
    }
    return TemplateResponse(request, "admin/runqueue/run/resolve_uncertain.html", context)
