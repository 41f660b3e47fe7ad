"""Tool calls awaiting a person's approval, and the run read as a
conversation: what support staff need to answer "why did the agent do
this?" and to decide what it may do next.

The decision form goes through ``leases.decide_tool`` (applied once, the
run resumed, a ``tool.decided`` event); a LogEntry goes to the run's admin
history. The conversation lists the run's steps in order: each model
request's response (text, the tool calls it asked for, finish reason,
tokens and their price) and each tool call (arguments, outcome, approval).
"""

from __future__ import annotations

from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.safestring import SafeString

from runqueue import leases
from runqueue.admin import permissions
from runqueue.admin.actions import actor, log_change
from runqueue.admin.display import pretty_json
from runqueue.admin.guard import json_area, reason_field
from runqueue.errors import RunqueueError
from runqueue.history import usage
from runqueue.models import ToolDecision, ToolInvocation, ToolStatus
from runqueue.runtime.tools import MODEL_STEP_PREFIX

#: How much of a step's JSON the conversation shows.
STEP_JSON_LIMIT = 2_000


class DecisionForm(forms.Form):
    """A decision: the reason is what a rejected call's handler (and its
    model) is told; edited arguments and a substitute result are JSON."""

    decision = forms.ChoiceField(choices=ToolDecision.choices, widget=forms.RadioSelect)
    reason = reason_field(
        "With a rejection: what the agent is told. Recorded with any decision.",
        required=False,
    )
    arguments = json_area(6, "With 'approve with edited arguments': the arguments it runs with.")
    result = json_area(4, "With 'respond': the result that stands for the call (it never runs).")

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        decision = data.get("decision")
        if decision == ToolDecision.EDIT and not isinstance(data.get("arguments"), dict):
            self.add_error("arguments", "Give the arguments as a JSON object.")
        return data

    def decision_kwargs(self) -> dict[str, object]:
        data = self.cleaned_data
        kwargs: dict[str, object] = {"decision": data["decision"], "reason": data["reason"]}
        if data["decision"] == ToolDecision.EDIT:
            kwargs["arguments"] = data["arguments"]
        if data["decision"] == ToolDecision.RESPOND:
            kwargs["result"] = data["result"]
        return kwargs


def view(model_admin: ModelAdmin, request: HttpRequest, tool_id: int) -> HttpResponse:
    """GET shows the call and the form; POST records the decision."""
    if not permissions.may_decide(request):
        raise PermissionDenied
    tool = get_object_or_404(ToolInvocation.objects.select_related("run"), pk=tool_id)
    run_page = reverse("admin:runqueue_run_change", args=[tool.run_id])
    form = DecisionForm(
        request.POST if request.method == "POST" else None,
        initial={"arguments": tool.arguments},
    )
    if request.method == "POST" and form.is_valid():
        kwargs = form.decision_kwargs()
        try:
            leases.decide_tool(tool.run_id, tool.seq, actor=actor(request), **kwargs)  # type: ignore[arg-type]
        except RunqueueError as exc:
            model_admin.message_user(
                request, f"{tool.tool} #{tool.seq}: not decided: {exc}", messages.ERROR
            )
        else:
            said = ToolDecision(str(kwargs["decision"])).label
            log_change(
                request,
                [tool.run],
                f"{said}: {tool.tool} #{tool.seq} by {actor(request)}"
                + (f": {kwargs['reason']}" if kwargs["reason"] else ""),
            )
            model_admin.message_user(
                request, f"{said}: {tool.tool} #{tool.seq}; the run resumes.", messages.SUCCESS
            )
        return redirect(run_page + "#conversation")
    context: dict[str, object] = {
        **model_admin.admin_site.each_context(request),
        "title": f"Decide {tool.tool} #{tool.seq}",
        "opts": model_admin.opts,
        "tool": tool,
        "run_page": run_page,
        "arguments": pretty_json(tool.arguments),
        "form": form,
        "decidable": tool.status == ToolStatus.AWAITING_APPROVAL and not tool.run.is_terminal,
    }
    return TemplateResponse(request, "admin/runqueue/run/decide_tool.html", context)


@dataclass(frozen=True, slots=True)
class Turn:
    """One step of the conversation as the run page shows it."""

    tool: ToolInvocation
    model: bool
    text: str
    tool_calls: list[dict[str, object]]
    finish_reason: str
    input_tokens: int
    output_tokens: int
    cost: str
    arguments_html: SafeString
    outcome_html: SafeString
    decided: dict[str, object] | None
    decide_url: str

    @classmethod
    def of(cls, tool: ToolInvocation, can_decide: bool) -> Turn:
        model = tool.tool.startswith(MODEL_STEP_PREFIX)
        response = tool.result if model and isinstance(tool.result, dict) else {}
        used = response.get("usage")
        tokens = used if isinstance(used, dict) else {}
        used_in, used_out = _int(tokens.get("input_tokens")), _int(tokens.get("output_tokens"))
        price = usage.price(str(response.get("model") or ""), used_in, used_out) if model else None
        calls = response.get("tool_calls")
        decided = (tool.approval or {}).get("decided") if tool.approval else None
        awaiting = tool.status == ToolStatus.AWAITING_APPROVAL
        outcome = tool.error if tool.error is not None else tool.result
        return cls(
            tool=tool,
            model=model,
            text=str(response.get("text") or ""),
            tool_calls=calls if isinstance(calls, list) else [],
            finish_reason=str(response.get("finish_reason") or ""),
            input_tokens=used_in,
            output_tokens=used_out,
            cost=usage.text(price) if price is not None else "",
            arguments_html=pretty_json(tool.arguments, STEP_JSON_LIMIT),
            outcome_html=pretty_json(outcome, STEP_JSON_LIMIT),
            decided=decided if isinstance(decided, dict) else None,
            decide_url=(
                reverse("admin:runqueue_run_decide", args=[tool.pk])
                if awaiting and can_decide
                else ""
            ),
        )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def conversation_html(records: list[ToolInvocation], can_decide: bool) -> SafeString:
    """The run's steps as a conversation, pending approvals first."""
    turns = [Turn.of(tool, can_decide) for tool in records]
    pending = [t for t in turns if t.tool.status == ToolStatus.AWAITING_APPROVAL]
    return render_to_string(
        "admin/runqueue/run/conversation.html",
        {"turns": turns, "pending": pending, "models": any(t.model for t in turns)},
    )
