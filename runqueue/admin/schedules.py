"""The schedule pages: the cron in words, the next three fire times in the
schedule's time zone, its last runs with their status, and Pause, Resume
and Run now, each confirmed and audited (a queue event and a LogEntry).
Settings schedules are shown read-only: settings are where they change."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from runqueue import registry, schedules
from runqueue.admin import display, permissions
from runqueue.admin.actions import actor, staff_id
from runqueue.admin.guard import GuardedAdmin
from runqueue.db import db_now
from runqueue.errors import RunqueueError
from runqueue.models import (
    PRIORITY_MAX,
    PriorityClass,
    Run,
    Schedule,
    ScheduleSource,
    ScheduleTick,
)
from runqueue.schedules import cron
from runqueue.schedules.spec import check_catch_up, check_name, check_runs, configured

if TYPE_CHECKING:
    # The stubs' name for what get_fieldsets returns (a list of TypedDicts).
    from django.contrib.admin.options import _FieldsetSpec

#: Ticks listed on a schedule's page, newest first.
LAST_TICKS = 10
OPERATIONS = {"pause": "Pause", "resume": "Resume", "run-now": "Run now"}


class ScheduleForm(forms.ModelForm):
    kind = forms.ChoiceField(choices=registry.kind_choices)
    priority = forms.IntegerField(
        min_value=0,
        max_value=PRIORITY_MAX,
        initial=PriorityClass.MAINTENANCE,
        help_text=f"{PriorityClass.describe()}.",
    )

    class Meta:
        model = Schedule
        fields = [
            "name",
            "cron",
            "timezone",
            "kind",
            "payload",
            "priority",
            "tenant",
            "max_attempts",
            "catch_up",
            "catch_up_limit",
            "overlap",
        ]

    def _checked[T](self, check: Callable[..., T], *args: object) -> T:
        try:
            return check(*args)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_name(self) -> str:
        name = self._checked(check_name, self.cleaned_data["name"])
        if any(spec.name == name for spec in configured()):
            raise forms.ValidationError(
                f"{name!r} is defined in RUNQUEUE['SCHEDULES'], which wins: choose another name."
            )
        return name

    def clean_cron(self) -> str:
        return self._checked(cron.validate, self.cleaned_data["cron"])

    def clean_timezone(self) -> str:
        self._checked(cron.zone, self.cleaned_data["timezone"])
        return self.cleaned_data["timezone"]

    def clean(self) -> dict[str, object]:
        super().clean()
        data = self.cleaned_data
        if "catch_up" in data and "catch_up_limit" in data:
            self._checked(check_catch_up, data["catch_up"], data["catch_up_limit"])
        # The runs it will submit, by submit's own rules: refused here, not
        # at every tick.
        if not self.errors and "name" in data:
            try:
                check_runs(
                    name=str(data["name"]),
                    kind=data.get("kind"),
                    payload=data.get("payload"),
                    tenant=data.get("tenant"),
                    priority=data.get("priority"),
                    max_attempts=data.get("max_attempts"),
                    registered_only=True,
                )
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from exc
        return data


@dataclass(frozen=True, slots=True)
class TickLine:
    """One line of a schedule's last ticks, its times in the schedule's zone."""

    outcome: str
    local: str
    skipped_until: str
    run: Run | None
    run_url: str = ""
    badge: str = ""

    @classmethod
    def of(cls, tick: ScheduleTick, tz: str) -> TickLine:
        run = tick.run
        return cls(
            outcome=tick.outcome,
            local=local(tick.tick_at, tz),
            skipped_until=local(tick.skipped_before, tz),
            run=run,
            run_url="" if run is None else reverse("admin:runqueue_run_change", args=[run.pk]),
            badge=""
            if run is None
            else display.status_badge(run.status, run.get_status_display()),
        )


def local(moment: dt.datetime | None, tz: str) -> str:
    """A time in the schedule's zone, with its abbreviation and offset."""
    if moment is None:
        return "never"
    return moment.astimezone(cron.zone(tz)).strftime("%Y-%m-%d %H:%M %Z (UTC%z)")


@admin.register(Schedule)
class ScheduleAdmin(GuardedAdmin):
    form = ScheduleForm
    list_display = ["name", "cron", "in_words", "timezone", "kind", "next_fire", "state", "source"]
    list_filter = ["source", "catch_up"]
    search_fields = ["=name", "=kind"]
    readonly_fields = ["state", "in_words", "next_three", "last_ticks"]
    change_form_template = "admin/runqueue/schedule/change_form.html"

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> _FieldsetSpec:
        if obj is None:
            return [(None, {"fields": [*ScheduleForm.Meta.fields]})]
        return [
            ("Status", {"fields": ["state", "in_words", "next_three", "last_ticks"]}),
            (None, {"fields": [*ScheduleForm.Meta.fields]}),
        ]

    def has_change_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        if obj is not None and obj.source != ScheduleSource.ADMIN:
            return False  # defined in settings, or by its tenant (API, handler)
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        if obj is not None and obj.source == ScheduleSource.SETTINGS and obj.retired_at is None:
            return False  # removing it from settings retires it
        return super().has_delete_permission(request, obj)

    def has_view_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        # Support staff who see runs see what makes them.
        return permissions.may_view(request, self.opts)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runqueue.operate_schedule")

    def save_model(
        self, request: HttpRequest, obj: Schedule, form: forms.BaseForm, change: bool
    ) -> None:
        schedules.save_definition(obj)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        schedules.sync_settings()  # settings schedules show before any worker ran
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, object] | None = None,
    ) -> HttpResponse:
        extra_context = {
            **(extra_context or {}),
            "rq_can_operate": self.has_operate_permission(request),
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.operate_view)
        return [
            *(
                path(
                    f"<path:object_id>/{operation}/",
                    view,
                    {"operation": operation},
                    name=f"runqueue_schedule_{operation.replace('-', '_')}",
                )
                for operation in OPERATIONS
            ),
            *super().get_urls(),
        ]

    # -- columns and status ----------------------------------------------------

    @admin.display(description="in words")
    def in_words(self, schedule: Schedule) -> str:
        if schedule.run_at is not None:
            return f"Once, at {local(schedule.run_at, 'UTC')}"
        return f"{cron.explain(schedule.cron)} ({schedule.timezone})"

    @admin.display(description="next fire", ordering="next_fire_at")
    def next_fire(self, schedule: Schedule) -> str:
        if schedule.paused_at or schedule.retired_at:
            return "-"
        return local(schedule.next_fire_at, schedule.timezone)

    @admin.display(description="state")
    def state(self, schedule: Schedule) -> str:
        if schedule.retired_at is not None:
            return f"Retired (gone from settings {display.age(schedule.retired_at)} ago)"
        if schedule.paused_at is not None:
            return (
                f"Paused by {schedule.paused_by} {display.age(schedule.paused_at)} ago: "
                f"{schedule.pause_reason}"
            )
        return "Active"

    @admin.display(description="next three fire times")
    def next_three(self, schedule: Schedule) -> SafeString:
        start = max(schedule.handled_until, db_now())
        if schedule.run_at is not None:
            times = iter([schedule.next_fire_at] if schedule.next_fire_at else [])
        else:
            times = itertools.islice(cron.upcoming(schedule.cron, schedule.timezone, start), 3)
        return format_html(
            '<ol class="rq-next-fires">{}</ol>',
            format_html_join("", "<li>{}</li>", ((local(t, schedule.timezone),) for t in times)),
        )

    @admin.display(description="last runs")
    def last_ticks(self, schedule: Schedule) -> SafeString:
        ticks = [
            TickLine.of(tick, schedule.timezone)
            for tick in schedule.ticks.select_related("run").order_by("-tick_at")[:LAST_TICKS]
        ]
        return render_to_string(
            "admin/runqueue/schedule/ticks.html", {"ticks": ticks, "schedule": schedule}
        )

    # -- Pause, Resume, Run now -------------------------------------------------

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        if operation not in OPERATIONS or not self.has_operate_permission(request):
            raise PermissionDenied
        try:
            schedule = Schedule.objects.get(pk=int(object_id))
        except (ValueError, Schedule.DoesNotExist):
            raise Http404(f"No schedule {object_id[:40]!r}.") from None
        reason = request.POST.get("reason", "").strip()
        missing_reason = False
        if request.method == "POST":
            if operation == "pause" and not reason:
                missing_reason = True
            else:
                self._operate(request, schedule, operation, reason)
                return HttpResponseRedirect(
                    reverse("admin:runqueue_schedule_change", args=[schedule.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{OPERATIONS[operation]} schedule {schedule.name}?",
            "schedule": schedule,
            "operation": operation,
            "label": OPERATIONS[operation],
            "in_words": self.in_words(schedule),
            "reason": reason,
            "missing_reason": missing_reason,
            # Run now's idempotency key: a double click submits it twice, one run.
            "token": request.POST.get("token") or uuid.uuid4().hex,
        }
        return TemplateResponse(request, "admin/runqueue/schedule/operate.html", context)

    def _operate(
        self, request: HttpRequest, schedule: Schedule, operation: str, reason: str
    ) -> None:
        who = actor(request)
        try:
            if operation == "pause":
                schedules.pause(schedule.pk, actor=who, reason=reason)
                message = f"Paused by {who}: {reason}"
            elif operation == "resume":
                schedules.resume(schedule.pk, actor=who, reason=reason)
                message = f"Resumed by {who}" + (f": {reason}" if reason else "")
            else:
                token = request.POST.get("token", "")
                sub = schedules.run_now(
                    schedule.pk, actor=who, idempotency_key=f"schedule:{schedule.pk}:{token}"
                )
                if sub.outcome == "replayed":
                    self.message_user(
                        request, f"Already submitted: run {sub.run.id}.", messages.WARNING
                    )
                    return
                message = f"Run now by {who}: run {sub.run.id}"
        except RunqueueError as exc:
            self.message_user(request, f"Schedule {schedule.name}: {exc}", messages.ERROR)
            return
        LogEntry.objects.log_actions(
            staff_id(request), [schedule], CHANGE, message, single_object=True
        )
        self.message_user(request, f"Schedule {schedule.name}: {message}.", messages.SUCCESS)
