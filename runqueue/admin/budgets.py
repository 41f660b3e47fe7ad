"""Budgets for model calls: staff set a key's requests and tokens per
window and its tenants' shares, see its use in the window now, and pause it
(a provider said 429 and Retry-After) or resume it. Every write of a pause
goes through ``runqueue.capacity.budgets``; the window's state is never a form field.
"""

from __future__ import annotations

import datetime as dt

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from runqueue.admin.guard import GuardedAdmin
from runqueue.capacity import budgets
from runqueue.db import db_now
from runqueue.models import Budget

#: The pause the admin action sets: a provider's usual Retry-After is shorter.
PAUSE = dt.timedelta(minutes=5)


@admin.action(description="Pause selected budgets for 5 minutes", permissions=["pause"])
def pause(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    for budget in queryset:
        until = budgets.pause_budget(budget.key, PAUSE)
        modeladmin.message_user(
            request, f"Paused {budget.key} until {until:%H:%M:%S}.", messages.SUCCESS
        )


@admin.action(description="Resume selected budgets now", permissions=["pause"])
def resume(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    for budget in queryset:
        budgets.resume_budget(budget.key)
        modeladmin.message_user(request, f"Resumed {budget.key}.", messages.SUCCESS)


@admin.register(Budget)
class BudgetAdmin(GuardedAdmin):
    def get_queryset(self, request: HttpRequest) -> QuerySet[Budget]:
        # Read with the database's time: a pause ends on its clock.
        return super().get_queryset(request).annotate(db_now=Now())

    list_display = ["key", "requests", "tokens", "per_seconds", "in_window", "paused", "note"]
    search_fields = ["=key"]
    search_help_text = "Exact budget key, e.g. openai:gpt-5."
    fields = ["key", "requests", "tokens", "per_seconds", "shares", "note"]
    actions = [pause, resume]
    ordering = ["key"]

    def get_changelist_instance(self, request: HttpRequest):  # type: ignore[no-untyped-def]
        # The windows of the page's budgets, read once (one statement).
        self._windows = {w.key: w for w in budgets.windows()}
        return super().get_changelist_instance(request)

    def _window(self, budget: Budget) -> budgets.Window | None:
        return getattr(self, "_windows", {}).get(budget.key)

    @admin.display(description="in the window now")
    def in_window(self, budget: Budget) -> str:
        window = self._window(budget)
        if window is None:
            return "-"
        parts = [f"{window.used_requests} requests", f"{window.used_tokens} tokens"]
        if window.waiting:
            parts.append(f"{window.waiting} runs waiting")
        return ", ".join(parts)

    @admin.display(description="paused until")
    def paused(self, budget: Budget) -> str:
        now = getattr(budget, "db_now", None) or db_now()  # the database's clock
        if budget.paused_until is None or budget.paused_until <= now:
            return "-"
        return f"{timezone.localtime(budget.paused_until):%Y-%m-%d %H:%M:%S}"

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runqueue.pause_budget")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        context = {
            "subtitle": "Calls reserved per window of per_seconds; a run waits in the queue "
            "until its call fits (RUNQUEUE['BUDGETS'] declares more)."
        }
        return super().changelist_view(request, context | (extra_context or {}))
