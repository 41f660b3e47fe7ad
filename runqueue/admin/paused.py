"""Paused kinds: the runs-list action that pauses, the page listing what is
paused (by whom, since when, why) with its Resume action, and the queue
events. Every write goes through ``runqueue.capacity.pausing``."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from runqueue import registry
from runqueue.admin import display, permissions
from runqueue.admin.actions import actor, staff_id
from runqueue.admin.guard import GuardedAdmin
from runqueue.admin.permissions import NoBulkDelete
from runqueue.capacity.pausing import pause_kind, resume_kind
from runqueue.models import PausedKind, PriorityClass, QueueEvent

#: Kinds one pause action may name.
MAX_KINDS = 20
ALL = ""
CLASS_CHOICES = [(ALL, "All classes"), *((str(c.value), c.label) for c in PriorityClass)]


def _class(value: str) -> int | None:
    return None if value in ("", None) else int(value)


def _log(request: HttpRequest, row: PausedKind, flag: int, message: str) -> None:
    LogEntry.objects.log_actions(staff_id(request), [row], flag, message, single_object=True)


@admin.action(description="Pause the kinds of selected runs", permissions=["pause"])
def pause_kinds(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
) -> HttpResponse | None:
    """Confirm with a reason and a class, then pause each distinct kind."""
    kinds = sorted(
        set(queryset.order_by().values_list("kind", flat=True).distinct()[: MAX_KINDS + 1])
    )
    if len(kinds) > MAX_KINDS:
        modeladmin.message_user(
            request, f"Select runs of at most {MAX_KINDS} kinds to pause.", messages.WARNING
        )
        return None
    reason = request.POST.get("reason", "").strip()
    klass = request.POST.get("priority_class", ALL)
    if request.POST.get("confirm") != "yes" or not reason or klass not in dict(CLASS_CHOICES):
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": f"Pause {len(kinds)} kind(s)?",
            "opts": modeladmin.model._meta,
            "kinds": kinds,
            "run_ids": queryset.values_list("pk", flat=True)[:100],
            "class_choices": CLASS_CHOICES,
            "priority_class": klass,
            "action": request.POST.get("action", ""),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "select_across": request.POST.get("select_across", "0"),
            "missing_reason": request.POST.get("confirm") == "yes" and not reason,
            "reason": reason,
        }
        return TemplateResponse(request, "admin/runqueue/run/pause_kinds.html", context)
    for kind in kinds:
        row, created = pause_kind(
            kind, priority_class=_class(klass), actor=actor(request), reason=reason
        )
        if created:
            _log(request, row, ADDITION, f"Paused by {actor(request)}: {reason}")
            modeladmin.message_user(request, f"Paused {row}.", messages.SUCCESS)
        else:
            modeladmin.message_user(
                request, f"{row} was already paused by {row.paused_by}.", messages.WARNING
            )
    return None


@admin.action(description="Resume selected kinds", permissions=["pause"])
def resume_kinds(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet
) -> HttpResponse | None:
    for row in list(queryset):
        if resume_kind(row.kind, priority_class=row.priority_class, actor=actor(request)):
            _log(request, row, DELETION, f"Resumed by {actor(request)}")
            modeladmin.message_user(request, f"Resumed {row}.", messages.SUCCESS)
    return None


class PauseForm(forms.ModelForm):
    kind = forms.ChoiceField(choices=registry.kind_choices)
    priority_class = forms.TypedChoiceField(
        choices=CLASS_CHOICES, coerce=_class, empty_value=None, required=False
    )
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"size": 80}))

    class Meta:
        model = PausedKind
        fields = ["kind", "priority_class", "reason"]


@admin.register(PausedKind)
class PausedKindAdmin(NoBulkDelete, GuardedAdmin):
    """What is paused, by whom, since when and why. Add pauses a kind."""

    list_display = ["kind", "class_display", "paused_by", "since", "paused_at", "reason"]
    form = PauseForm
    actions = [resume_kinds]

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return permissions.may_pause(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_pause_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: PausedKind | None = None) -> bool:
        return False  # resume and pause again: each is an audited event

    def has_delete_permission(self, request: HttpRequest, obj: PausedKind | None = None) -> bool:
        return False  # the Resume action deletes, through the service

    def has_view_permission(self, request: HttpRequest, obj: PausedKind | None = None) -> bool:
        return permissions.may_view(request, self.opts)

    def save_model(
        self, request: HttpRequest, obj: PausedKind, form: forms.Form, change: bool
    ) -> None:
        row, created = pause_kind(
            obj.kind, priority_class=obj.priority_class, actor=actor(request), reason=obj.reason
        )
        obj.pk, obj.paused_by, obj.paused_at = row.pk, row.paused_by, row.paused_at
        if not created:
            self.message_user(
                request, f"{row} was already paused by {row.paused_by}.", messages.WARNING
            )

    def log_addition(self, request: HttpRequest, obj: PausedKind, message: object) -> LogEntry:
        return super().log_addition(request, obj, f"Paused by {actor(request)}: {obj.reason}")

    @admin.display(description="class", ordering="priority_class")
    def class_display(self, row: PausedKind) -> str:
        if row.priority_class is None:
            return "All classes"
        return PriorityClass(row.priority_class).label

    since = display.age_column("paused_at", "paused for")


@admin.register(QueueEvent)
class QueueEventAdmin(GuardedAdmin):
    """Kinds paused and resumed, schedules paused, resumed and run: read-only."""

    list_display = ["created_at", "type", "subject", "data"]
    list_filter = ["type"]
    search_fields = ["=subject"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PausedKind | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: PausedKind | None = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: PausedKind | None = None) -> bool:
        return permissions.may_view(request, self.opts)
