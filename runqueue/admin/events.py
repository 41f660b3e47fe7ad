"""Inbound events in the admin: the triggers staff declare (each matching
event of a name starts a run of a kind) and the events received, read-only
(their data, key and the runs their triggers started).

A trigger's match is a JSON object the event's data must contain
(PostgreSQL's jsonb ``@>``), checked when saved, as is its kind (a kind
this process has a handler for, never a reserved one): a trigger that
could not start its run would refuse every event of its name
(``event-trigger-failed``) until fixed.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from runqueue import leases, registry
from runqueue.admin.guard import GuardedAdmin
from runqueue.admin.permissions import NoBulkDelete
from runqueue.conf import RESERVED_KIND_PREFIXES
from runqueue.models import PRIORITY_MAX, EventTrigger, InboundEvent


class EventTriggerForm(forms.ModelForm):
    """The name, match and kind checked as the event path will use them."""

    class Meta:
        model = EventTrigger
        fields = ("name", "match", "kind", "priority", "tenant", "enabled", "note")

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if (problem := leases.signal_name_problem(name)) is not None:
            raise forms.ValidationError(f"An event's name {problem}.")
        return name

    def clean_match(self) -> object:
        match = self.cleaned_data["match"]
        match = {} if match in (None, "") else match
        if (problem := leases.event_match_problem(match)) is not None:
            raise forms.ValidationError(f"The match {problem}.")
        return match

    def clean_kind(self) -> str:
        kind = self.cleaned_data["kind"]
        if kind.startswith(RESERVED_KIND_PREFIXES):
            raise forms.ValidationError(f"Kind {kind!r} is reserved: runqueue's own jobs.")
        if not registry.is_registered(kind):
            raise forms.ValidationError(f"No handler of kind {kind!r} is registered here.")
        return kind

    def clean_priority(self) -> int:
        priority = self.cleaned_data["priority"]
        if not 0 <= priority <= PRIORITY_MAX:
            raise forms.ValidationError(f"A priority is 0 to {PRIORITY_MAX}.")
        return priority


@admin.register(EventTrigger)
class EventTriggerAdmin(GuardedAdmin):
    form = EventTriggerForm
    list_display = ("name", "match", "kind", "priority", "tenant", "enabled", "note")
    list_filter = ("enabled", "name")
    search_fields = ("=name", "kind")
    ordering = ("name", "id")


@admin.register(InboundEvent)
class InboundEventAdmin(NoBulkDelete, GuardedAdmin):
    """Read-only: an event is what another system sent."""

    list_display = ("name", "key", "tenant", "received_at", "runs_started")
    replica_pages = ("changelist",)
    list_filter = ("name", "tenant")
    search_fields = ("=name", "=key")
    ordering = ("-id",)
    fields = ("name", "key", "tenant", "principal", "received_at", "data", "started_links")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.display(description="runs started")
    def runs_started(self, event: InboundEvent) -> int:
        return len(event.started or [])

    @admin.display(description="runs its triggers started")
    def started_links(self, event: InboundEvent) -> str:
        rows = [s for s in event.started or [] if isinstance(s, dict)]
        if not rows:
            return "none"
        return format_html_join(
            ", ",
            "{} ({})",
            ((_run_link(str(row.get("run"))), row.get("trigger")) for row in rows),
        )


def _run_link(run_id: str) -> str:
    try:
        url = reverse("admin:runqueue_run_change", args=[run_id])
    except NoReverseMatch:
        return run_id
    return format_html('<a href="{}">{}</a>', url, run_id)
