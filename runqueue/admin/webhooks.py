"""Admin for webhooks: endpoints (the secret shown once, at creation and at
each rotation, as an API token's is), and deliveries (filter the dead
ones; resend, with a permission of its own).

A delivery's state is its maintenance run's: being tried (queued or
running), delivered (succeeded) or dead (failed, its tries spent or its URL
refused). The run's own page shows every try's error and time.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from runqueue import webhooks
from runqueue.admin import secrets
from runqueue.admin.guard import GuardedAdmin
from runqueue.admin.permissions import NoBulkDelete
from runqueue.errors import RunqueueError
from runqueue.models import (
    Run,
    RunStatus,
    WebhookDelivery,
    WebhookEndpoint,
)
from runqueue.webhooks.sending import DELIVER

SHOWN_ONCE_TEMPLATE = "admin/runqueue/webhookendpoint/secret_shown.html"


class WebhookEndpointForm(forms.ModelForm):
    """The URL checked against the SSRF rule, the filters' shapes checked,
    before anything is saved."""

    class Meta:
        model = WebhookEndpoint
        fields = (
            "name",
            "url",
            "tenant",
            "subscribed",
            "kinds",
            "event_types",
            "token",
            "max_attempts",
            "active",
        )

    def clean(self) -> dict:
        data = super().clean() or {}
        endpoint: WebhookEndpoint = self.instance
        for name in ("url", "kinds", "event_types", "token"):
            if name in data:
                setattr(endpoint, name, data[name])
        try:
            # Assigns a new endpoint's secret (kept on the instance until save).
            self.new_secret = webhooks.prepare_endpoint(endpoint)
        except ValueError as exc:  # UrlRefused is one
            raise forms.ValidationError(str(exc)) from exc
        return data


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(secrets.ShowsSecretOnAdd, NoBulkDelete, GuardedAdmin):
    form = WebhookEndpointForm
    list_display = ("__str__", "url", "tenant", "subscribed", "active", "rotation", "created_at")
    list_filter = ("active", "subscribed", "tenant")
    search_fields = ("name", "url", "tenant")
    raw_id_fields = ("token",)
    readonly_fields = ("principal", "previous_secret_until", "created_at")
    actions = ("rotate_secrets", "disable_endpoints")

    @admin.display(description="old secret signs until")
    def rotation(self, obj: WebhookEndpoint) -> str:
        return "" if obj.previous_secret_until is None else str(obj.previous_secret_until)

    def save_model(
        self, request: HttpRequest, obj: WebhookEndpoint, form: forms.BaseForm, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        secret = getattr(form, "new_secret", None)
        if secret:
            secrets.made(request, secret)

    def secret_made(self, request: HttpRequest, obj: WebhookEndpoint, secret: str) -> HttpResponse:
        return self._secret_page(request, [(obj, secret)], "Webhook endpoint created")

    def _secret_page(
        self, request: HttpRequest, shown: list[tuple[WebhookEndpoint, str]], title: str
    ) -> HttpResponse:
        return secrets.shown_once(
            self, request, SHOWN_ONCE_TEMPLATE, {"shown": shown, "title": title}
        )

    @admin.action(description="Rotate the secret of selected endpoints", permissions=["change"])
    def rotate_secrets(
        self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]
    ) -> HttpResponse:
        shown = [(e, webhooks.rotate_secret(e)) for e in queryset]
        return self._secret_page(request, shown, "Webhook secrets rotated")

    @admin.action(description="Disable selected endpoints", permissions=["change"])
    def disable_endpoints(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        count = queryset.filter(active=True).update(active=False)
        self.message_user(request, f"Disabled {count} endpoint(s).", messages.SUCCESS)


class DeliveryStateFilter(admin.SimpleListFilter):
    """Dead, delivered or being tried: the state of each delivery's run."""

    title = "state"
    parameter_name = "state"
    STATES = {
        "dead": [RunStatus.FAILED, RunStatus.CANCELLED],
        "delivered": [RunStatus.SUCCEEDED],
        "trying": [RunStatus.QUEUED, RunStatus.RUNNING],
    }

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin
    ) -> list[tuple[str, str]]:
        return [("dead", "dead"), ("delivered", "delivered"), ("trying", "being tried")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        statuses = self.STATES.get(self.value() or "")
        if statuses is None:
            return queryset
        runs = Run.objects.filter(kind=DELIVER, status__in=statuses).values("id")
        return queryset.filter(attempt_run__in=runs)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(NoBulkDelete, GuardedAdmin):
    list_display = (
        "id",
        "event_type",
        "endpoint",
        "url",
        "subject",
        "state",
        "attempts",
        "last_status",
        "last_attempt_at",
    )
    list_filter = (DeliveryStateFilter, "event_type", "endpoint")
    search_fields = ("message_id", "url")
    list_select_related = ("endpoint",)
    actions = ("resend",)

    def get_readonly_fields(
        self, request: HttpRequest, obj: WebhookDelivery | None = None
    ) -> list[str]:
        return [f.name for f in WebhookDelivery._meta.fields] + ["state", "subject", "tries"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written with the event they report, never by hand

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_resend_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runqueue.resend_delivery")

    @admin.display(description="run")
    def subject(self, obj: WebhookDelivery) -> str:
        url = reverse("admin:runqueue_run_change", args=[obj.run_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.run_id)[:8])

    @admin.display(description="state")
    def state(self, obj: WebhookDelivery) -> str:
        status = Run.objects.filter(id=obj.attempt_run_id).values_list("status", flat=True).first()
        for name, statuses in DeliveryStateFilter.STATES.items():
            if status in statuses:
                return name
        return str(status or "gone")

    @admin.display(description="tries (its run)")
    def tries(self, obj: WebhookDelivery) -> str:
        url = reverse("admin:runqueue_run_change", args=[obj.attempt_run_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.attempt_run_id))

    @admin.action(description="Resend selected deliveries", permissions=["resend"])
    def resend(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        sent, refused = 0, []
        actor = f"admin:{request.user.get_username()}"
        for delivery in queryset.select_related("endpoint"):
            try:
                webhooks.resend(delivery, actor=actor)
                sent += 1
            except RunqueueError as exc:
                refused.append(f"{delivery.pk}: {exc}")
        if sent:
            self.message_user(request, f"Resending {sent} delivery(ies).", messages.SUCCESS)
        if refused:
            self.message_user(request, "Not resent: " + "; ".join(refused), messages.WARNING)
