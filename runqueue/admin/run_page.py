"""The run's page: its sections (lease, budget, tree and wait, session,
usage, failure, the conversation, tool invocations, the event timeline,
checkpoints, data), each read-only, and the prefetching that fills them.

Apart from the changelists (runs.py), which list runs and hold the run
admin's URLs: ``RunPage`` is mixed into ``RunAdmin``. What a section shows
is rendered by the modules that own it (approvals, tree, forks, display).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from runqueue.admin import approvals, display, forks, tree
from runqueue.admin.permissions import RunPermissionsMixin
from runqueue.models import Checkpoint, EventLog, Run, ToolInvocation, ToolStatus

#: Events shown on a run's page, newest first; a looping run can log many.
TIMELINE_LIMIT = 200
#: Characters of a tool call's arguments or error on the run page.
TOOL_JSON_LIMIT = 1500


@dataclass(frozen=True)
class ToolLine:
    """A tool invocation as the run page's table shows it."""

    tool: ToolInvocation
    unresolved: bool
    resolve_url: str
    arguments_html: SafeString
    error_html: SafeString
    #: "Fork from here" on a finished run's step (staff who may fork).
    fork_url: str = ""

    @classmethod
    def of(cls, tool: ToolInvocation, fork_url: str = "") -> ToolLine:
        return cls(
            tool=tool,
            unresolved=tool.status == ToolStatus.UNCERTAIN and tool.resolution is None,
            resolve_url=reverse("admin:runqueue_run_resolve", args=[tool.pk]),
            arguments_html=display.pretty_json(tool.arguments, TOOL_JSON_LIMIT),
            error_html=display.pretty_json(tool.error, TOOL_JSON_LIMIT),
            fork_url=fork_url,
        )


def _section(
    description: str, render: Callable[[Run], SafeString]
) -> Callable[[admin.ModelAdmin, Run], SafeString]:
    """A read-only section of the run's page that another module renders
    from the run alone (a ``readonly_fields`` entry, headed ``description``)."""

    @admin.display(description=description)
    def section(_admin: admin.ModelAdmin, run: Run) -> SafeString:
        return render(run)

    return section


class RunPage(RunPermissionsMixin, admin.ModelAdmin):
    """The run's page (``change_view``): its fieldsets, its read-only
    sections, and the run loaded with what they show."""

    change_form_template = "admin/runqueue/run/change_form.html"
    # status_display and attempts_display are list columns too (runs.py).
    readonly_fields = [
        "lineage_display",
        "usage_display",
        "status_display",
        "class_display",
        "attempts_display",
        "budget_display",
        "failure_display",
        "tools_display",
        "conversation_display",
        "timeline_display",
        "checkpoints_display",
        "payload_display",
        "input_display",
        "result_display",
        "parent_display",
        "children_display",
        "wait_display",
        "session_display_line",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    ("id", "status_display"),
                    ("kind", "handler_version", "class_display"),
                    ("tenant", "principal", "session_id"),
                    "concurrency_key",
                    ("created_at", "started_at", "finished_at"),
                ]
            },
        ),
        (
            "Lease",
            {
                "fields": [
                    ("attempts_display", "lease_epoch"),
                    ("lease_owner", "lease_expires_at", "heartbeat_at"),
                    "scheduled_for",
                ]
            },
        ),
        ("Budget", {"fields": ["budget_display"]}),
        (
            "Tree and wait",
            {"fields": ["parent_display", "children_display", "lineage_display", "wait_display"]},
        ),
        ("Session", {"fields": ["session_display_line"]}),
        ("Usage and cost", {"fields": ["usage_display"]}),
        ("Failure (the dead letter)", {"fields": ["failure_display"]}),
        ("Conversation", {"fields": ["conversation_display"]}),
        ("Tool invocations", {"fields": ["tools_display"]}),
        ("Event timeline", {"fields": ["timeline_display"]}),
        ("Checkpoints", {"fields": ["checkpoints_display"]}),
        ("Data", {"fields": ["payload_display", "input_display", "result_display"]}),
    ]

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Run | None:
        """The detail page prefetches its tables: three queries, not one per row."""
        queryset = self.get_queryset(request).prefetch_related(
            Prefetch(
                "log",
                queryset=EventLog.objects.order_by("-id")[:TIMELINE_LIMIT],
                to_attr="recent_events",
            ),
            Prefetch("tool_invocations", queryset=ToolInvocation.objects.order_by("seq")),
            Prefetch("checkpoints", queryset=Checkpoint.objects.order_by("-seq")),
        )
        model = queryset.model
        field = model._meta.pk if from_field is None else model._meta.get_field(from_field)
        try:
            run = queryset.get(**{field.name: field.to_python(object_id)})
        except (model.DoesNotExist, ValidationError, ValueError):
            return None
        # Display methods see the run, not the request: carry the answer.
        run.can_resolve = self.has_resolve_permission(request)
        run.can_fork = run.is_terminal and self.has_fork_permission(request)
        run.can_decide = self.has_decide_permission(request)
        run.unresolved_tools = [
            t
            for t in run.tool_invocations.all()
            if t.status == ToolStatus.UNCERTAIN and t.resolution is None
        ]
        run.header = render_to_string(
            "admin/runqueue/run/header.html",
            {
                "run": run,
                "status": display.status_badge(run.status, run.get_status_display()),
                "marker": display.uncertain_marker(len(run.unresolved_tools))
                if run.unresolved_tools
                else "",
            },
        )
        return run

    @admin.display(description="class", ordering="priority")
    def class_display(self, run: Run) -> str:
        return f"{run.priority_class.label} ({run.priority})"

    @admin.display(description="model calls")
    def budget_display(self, run: Run) -> str:
        """What the run reserved and used on budgets, and its next call's."""
        if run.budget_key is None and not run.budget_reserved and not run.budget_used:
            return "no budget"
        done = f"reserved {run.budget_reserved:,} tokens, used {run.budget_used:,}"
        if run.budget_key is None:
            return done
        return f"{done}; each claim reserves {run.budget_tokens:,} tokens on {run.budget_key}"

    # -- detail page ---------------------------------------------------------

    @admin.display(description="failure")
    def failure_display(self, run: Run) -> SafeString:
        if not run.failure:
            return format_html("<span>{}</span>", "No failure recorded.")
        return render_to_string("admin/runqueue/run/failure.html", {"failure": run.failure})

    @admin.display(description="events (newest first)")
    def timeline_display(self, run: Run) -> SafeString:
        events = getattr(run, "recent_events", None)
        if events is None:
            events = list(run.log.order_by("-id")[:TIMELINE_LIMIT])
        return render_to_string(
            "admin/runqueue/run/timeline.html", {"events": events, "limit": TIMELINE_LIMIT}
        )

    @admin.display(description="tool invocations (the run's steps)")
    def tools_display(self, run: Run) -> SafeString:
        records = list(run.tool_invocations.all())
        can_fork = getattr(run, "can_fork", False)
        links = dict(forks.fork_links(run, len(records))) if can_fork else {}
        tools = [ToolLine.of(tool, links.get(tool.seq, "")) for tool in records]
        return render_to_string(
            "admin/runqueue/run/tools.html",
            {
                "tools": tools,
                "can_resolve": getattr(run, "can_resolve", False),
                "fork_links": bool(links),
                "fork_after": links.get(len(records), ""),
            },
        )

    @admin.display(description="what the agent did, step by step")
    def conversation_display(self, run: Run) -> SafeString:
        records = list(run.tool_invocations.all())
        return approvals.conversation_html(records, getattr(run, "can_decide", False))

    lineage_display = _section("forks", tree.lineage_html)
    usage_display = _section("model calls", tree.usage_html)

    @admin.display(description="checkpoints (newest first)")
    def checkpoints_display(self, run: Run) -> SafeString:
        checkpoints = list(run.checkpoints.all())
        if not checkpoints:
            return format_html("<span>{}</span>", "No checkpoints.")
        return format_html(
            "<table><tr><th>seq</th><th>tool seq</th><th>epoch</th><th>at</th>"
            "<th>state</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (c.seq, c.tool_seq, c.lease_epoch, c.created_at, display.pretty_json(c.state))
                    for c in checkpoints
                ),
            ),
        )

    parent_display = _section("parent", tree.parent_html)
    children_display = _section("children", tree.children_html)
    session_display_line = _section("its line: active run, then pending turns", tree.session_html)
    wait_display = _section("wait, or why it waits", tree.wait_html)
    payload_display = _section("payload", lambda run: display.pretty_json(run.payload))
    input_display = _section("input", lambda run: display.pretty_json(run.input))
    result_display = _section("result", lambda run: display.pretty_json(run.result))
