"""Run changelists (all, dead-lettered, uncertain): their columns, filters,
search and actions, and the run admin's URLs.

Runs are read-only here: no add, no delete, no hand edits of status, epoch or
lease. State changes go through the actions (actions.py) and the resolve
view (resolve.py), which call the service layer. A run's own page, its
sections, is ``RunPage`` (run_page.py), mixed into ``RunAdmin``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from runqueue import reads
from runqueue.admin import approvals, dashboard, display, forks, resolve, sessions
from runqueue.admin.actions import cancel_runs, pause_runs, requeue_runs, resume_runs
from runqueue.admin.bulk import OperatorMixin
from runqueue.admin.filters import (
    FailureFilter,
    ForkFilter,
    KindFilter,
    PausedFilter,
    PriorityClassFilter,
    TenantFilter,
    UsageFilter,
    usage_columns,
)
from runqueue.admin.guard import GuardedAdmin
from runqueue.admin.pagination import CappedCountPaginator
from runqueue.admin.paused import pause_kinds
from runqueue.admin.permissions import NoBulkDelete
from runqueue.admin.run_page import RunPage
from runqueue.history import usage
from runqueue.models import DeadLetteredRun, Run, ToolInvocation, ToolStatus, UncertainRun
from runqueue.sql import execute

if TYPE_CHECKING:
    # The stubs' name for what get_list_display returns.
    from django.contrib.admin.options import _ListDisplayT

#: Characters of a list cell before it is shortened (the rest in its title),
#: so Status and the columns after it fit a 1366 px screen.
KIND_WIDTH = 28
SESSION_WIDTH = 16
TENANT_WIDTH = 14
FAILURE_WIDTH = 60

#: The shortest run id prefix searched as one: the list shows 8 characters.
ID_PREFIX_MIN = 8


#: The fields a search term must equal (each has an index), in the order
#: ``admin_search_fields`` probes them.
SEARCHED = ("session_id", "tenant", "principal")


def id_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The run ids a search term stands for, as an inclusive range (a range
    on the uuid is what the id index serves; its text form's LIKE is not):
    a whole id is itself, a hex prefix of at least ID_PREFIX_MIN digits
    every id that starts with it. None for any other term."""
    digits = term.lower().replace("-", "")
    if not ID_PREFIX_MIN <= len(digits) <= 32 or any(c not in "0123456789abcdef" for c in digits):
        return None
    if len(digits) == 32 and term.count("-") not in (0, 4):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def unresolved_uncertain() -> Exists:
    """Whether the run has an uncertain tool call nobody has resolved: one
    probe of the partial index runqueue_tool_unresolved_idx per listed run."""
    return Exists(
        ToolInvocation.objects.filter(
            run=OuterRef("pk"), status=ToolStatus.UNCERTAIN, resolution__isnull=True
        )
    )


@admin.register(Run)
class RunAdmin(OperatorMixin, RunPage, NoBulkDelete, GuardedAdmin):
    list_display = [
        "short_id",
        "status_display",
        "kind_display",
        "session_display",
        "class_short",
        "attempts_display",
        "age_display",
        "tenant_display",
    ]
    list_display_links = ["short_id"]
    # Lists read the replica when one is set; a run's page, whose actions
    # need the run as it is now, reads the primary.
    replica_pages = ("changelist", "dashboard", "session")
    list_filter = [
        "status",
        PriorityClassFilter,
        KindFilter,
        TenantFilter,
        UsageFilter,
        ForkFilter,
        PausedFilter,
        "created_at",
    ]
    search_fields = ["=id", "=session_id", "=tenant", "=principal"]
    search_help_text = (
        "A run id or its first 8 characters; an exact session id, tenant or principal."
    )
    ordering = ["-created_at"]
    list_per_page = 50
    paginator = CappedCountPaginator
    show_full_result_count = False
    actions = [requeue_runs, cancel_runs, pause_runs, resume_runs, pause_kinds]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        """Every list and the run page know which runs are uncertain, and
        what each run's recorded model calls cost (one probe per listed run
        of the usage table's (run, epoch, call) index)."""
        return (
            super()
            .get_queryset(request)
            .annotate(has_uncertain=unresolved_uncertain(), **usage_columns())
        )

    def action_checkbox(self, obj: Run) -> SafeString:
        """Django's row checkbox, the same HTML written directly: its widget
        renders through the form template engine, about a fifth of a
        50-row page's time."""
        label = format_html(gettext("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            ACTION_CHECKBOX_NAME,
            str(obj.pk),
            label,
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        """Exact matches only, each through an index: a session id, tenant or
        principal, a run id, or the start of one (the list shows 8 characters).

        A term almost always names one of them, so each field is probed first
        (one index probe) and only the fields that hold it are searched: a
        tenant alone walks the tenant index in the list's order and stops at
        the page; OR-ed with the others, every run of the tenant was read and
        sorted."""
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(pk__in=[])
        with reads.read_connection().cursor() as cursor:  # the list's, replica or not
            held = execute(cursor, "admin_search_fields", {"term": term}).fetchone()
        for field, holds in zip(SEARCHED, held, strict=True):
            if holds:
                match |= Q(**{field: term})
        if (ids := id_range(term)) is not None:
            match |= Q(id__gte=ids[0], id__lte=ids[1])
        return queryset.filter(match), False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("dashboard/", view(self.dashboard_view), name=f"{prefix}_dashboard"),
            path("session/", view(self.session_view), name=f"{prefix}_session"),
            path(
                "tool/<int:tool_id>/resolve/",
                view(self.resolve_view),
                name=f"{prefix}_resolve",
            ),
            path("tool/<int:tool_id>/decide/", view(self.decide_view), name=f"{prefix}_decide"),
            path("<path:object_id>/fork/", view(self.fork_view), name=f"{prefix}_fork"),
            *self.bulk_urls(),
            *super().get_urls(),
        ]

    def fork_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return forks.view(self, request, object_id)

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return dashboard.view(self, request)

    def session_view(self, request: HttpRequest) -> HttpResponse:
        return sessions.view(self, request)

    def resolve_view(self, request: HttpRequest, tool_id: int) -> HttpResponse:
        return resolve.view(self, request, tool_id)

    def decide_view(self, request: HttpRequest, tool_id: int) -> HttpResponse:
        return approvals.view(self, request, tool_id)

    # -- list columns -------------------------------------------------------

    @admin.display(description="run", ordering="id")
    def short_id(self, run: Run) -> SafeString:
        return format_html('<span title="{}">{}</span>', run.id, str(run.id)[:8])

    @admin.display(description="status", ordering="status")
    def status_display(self, run: Run) -> SafeString:
        badge = display.status_badge(run.status, run.get_status_display())
        if not getattr(run, "has_uncertain", False):
            return badge
        return format_html("{} {}", badge, display.uncertain_marker())

    def get_list_display(self, request: HttpRequest) -> _ListDisplayT:
        """The cost column when the list is filtered by model calls: on every
        list it pushed the table past a support agent's 1366 px screen."""
        if request.GET.get(UsageFilter.parameter_name):
            return [*self.list_display, "cost_display"]
        return self.list_display

    @admin.display(description="kind", ordering="kind")
    def kind_display(self, run: Run) -> SafeString | str:
        return display.short(run.kind, KIND_WIDTH)

    @admin.display(description="session", ordering="session_id")
    def session_display(self, run: Run) -> SafeString | str:
        return display.short(run.session_id, SESSION_WIDTH)

    @admin.display(description="tenant", ordering="tenant")
    def tenant_display(self, run: Run) -> SafeString | str:
        return display.short(run.tenant, TENANT_WIDTH)

    @admin.display(description="class", ordering="priority")
    def class_short(self, run: Run) -> SafeString:
        """The class in a list, its priority in the title (narrower)."""
        return format_html(
            '<span title="priority {}">{}</span>', run.priority, run.priority_class.label
        )

    @admin.display(description="attempts")
    def attempts_display(self, run: Run) -> str:
        return f"{run.attempts}/{run.max_attempts}"

    @admin.display(description="cost")
    def cost_display(self, run: Run) -> SafeString | str:
        """The cost of the run's recorded model calls, its tokens in the title."""
        calls = getattr(run, "usage_calls", None)
        if not calls:
            return "-"
        tokens_in = getattr(run, "usage_input", None) or 0
        tokens_out = getattr(run, "usage_output", None) or 0
        total = getattr(run, "usage_cost", None)
        cost = usage.text(total) if total is not None else "?"
        unknown = "+?" if getattr(run, "usage_unpriced", None) else ""
        return format_html(
            '<span title="{} calls, {} tokens in, {} out">{}{}</span>',
            calls,
            f"{tokens_in:,}",
            f"{tokens_out:,}",
            cost,
            unknown,
        )

    age_display = display.age_column("created_at", "age")


class RunListAdmin(RunAdmin):
    """A list of some runs (the failed ones, the uncertain ones): its bulk
    pages are its own; a run's pages (dashboard, session, resolve, decide,
    fork) stay the runs admin's."""

    def get_urls(self) -> list[URLPattern]:
        return [*self.bulk_urls(), *admin.ModelAdmin.get_urls(self)]


@admin.register(DeadLetteredRun)
class DeadLetteredRunAdmin(RunListAdmin):
    """Failed runs, most recently failed first, with the reason at a glance."""

    list_display = [
        "short_id",
        "failure_summary",
        "kind_display",
        "session_display",
        "attempts_display",
        "failed_ago",
        "tenant_display",
    ]
    list_filter = [FailureFilter, PriorityClassFilter, KindFilter, TenantFilter, "finished_at"]
    ordering = ["-finished_at"]
    actions = [requeue_runs, forks.fork_from_failure]
    bulk_verbs = ("requeue",)

    @admin.display(description="failure")
    def failure_summary(self, run: Run) -> SafeString | str:
        failure = run.failure or {}
        text = display.short(
            f"{failure.get('error_type', '?')}: {failure.get('message', '')}", FAILURE_WIDTH
        )
        if not getattr(run, "has_uncertain", False):
            return text
        # Every run here is failed: the marker goes with the failure.
        return format_html("{} {}", display.uncertain_marker(), text)

    failed_ago = display.age_column("finished_at", "failed")


@admin.register(UncertainRun)
class UncertainRunAdmin(RunListAdmin):
    """Runs with a side effect nobody knows happened: resolve each one."""

    list_display = [
        "short_id",
        "status_display",
        "resolve_links",
        "kind_display",
        "session_display",
        "age_display",
        "tenant_display",
    ]
    list_filter = ["status", PriorityClassFilter, KindFilter, TenantFilter]
    # Resolving is what this list is for; cancelling stays on the runs list
    # and the run's page (most runs here have finished anyway).
    actions: list = []
    bulk_verbs = ()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        unresolved = ToolInvocation.objects.filter(
            status=ToolStatus.UNCERTAIN, resolution__isnull=True
        ).order_by("seq")
        return (
            super()
            .get_queryset(request)
            .prefetch_related(
                Prefetch("tool_invocations", queryset=unresolved, to_attr="unresolved_tools")
            )
        )

    def get_list_display(self, request: HttpRequest) -> _ListDisplayT:
        """Staff who may resolve get links; the others see the same list."""
        if self.has_resolve_permission(request):
            return self.list_display
        return [
            "uncertain_tools" if name == "resolve_links" else name for name in self.list_display
        ]

    @admin.display(description="uncertain calls")
    def uncertain_tools(self, run: Run) -> SafeString:
        tools = getattr(run, "unresolved_tools", [])
        return format_html_join(", ", "{} #{}", ((t.tool, t.seq) for t in tools))

    @admin.display(description="uncertain calls")
    def resolve_links(self, run: Run) -> SafeString:
        tools = getattr(run, "unresolved_tools", [])
        return format_html_join(
            ", ",
            '<a class="rq-resolve" href="{}">Resolve {} #{}</a>',
            ((reverse("admin:runqueue_run_resolve", args=[t.pk]), t.tool, t.seq) for t in tools),
        )
