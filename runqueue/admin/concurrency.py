"""Concurrency limits: staff cap (or pause, with 0) a concurrency key in a
priority class, and see how many of its runs run now.

A limit overrides ``RUNQUEUE["CONCURRENCY"]`` for its key and class. Saving
or deleting one tells every worker at once (a NOTIFY); the claim enforces
it from the next claim on. Runs already running above a lowered limit are
left to finish: no new one starts until the key is under it.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from runqueue.admin.guard import GuardedAdmin
from runqueue.capacity import concurrency
from runqueue.conf import get_settings
from runqueue.models import ConcurrencyLimit, PriorityClass


@admin.register(ConcurrencyLimit)
class ConcurrencyLimitAdmin(GuardedAdmin):
    list_display = ["key", "priority_class", "max_running", "running_now", "note", "updated_at"]
    list_filter = ["priority_class"]
    search_fields = ["=key"]
    search_help_text = "Exact concurrency key (a run's tenant unless its submitter chose one)."
    fields = ["key", "priority_class", "max_running", "note"]
    ordering = ["key", "priority_class"]

    @admin.display(description="running now")
    def running_now(self, limit: ConcurrencyLimit) -> str:
        running = concurrency.running(limit.key, PriorityClass(limit.priority_class))
        return f"{running} of {limit.max_running}" if limit.max_running else f"{running} (paused)"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        conf = get_settings()
        defaults = ", ".join(
            f"{member.slug} {'no cap' if (cap := conf.default_cap(member)) is None else cap}"
            for member in PriorityClass
        )
        context = {"subtitle": f"Keys without a limit: {defaults} (RUNQUEUE['CONCURRENCY'])"}
        return super().changelist_view(request, context | (extra_context or {}))
