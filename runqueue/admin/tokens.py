"""Admin for API tokens: create one for a user and tenant, see it once, revoke;
set what it may submit (its highest priority class) and how often it may
write (its quota: submits, cancels, signals and answers).

The raw token is rendered once, on the page that answers the add form, and
never stored (not even in a message, which would sit in a cookie or the
session): only its SHA-256 is kept.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from runqueue import tokens
from runqueue.admin import display, secrets
from runqueue.admin.guard import GuardedAdmin
from runqueue.admin.permissions import NoBulkDelete
from runqueue.models import ApiToken

if TYPE_CHECKING:
    # The stubs' name for what get_fields returns.
    from django.contrib.admin.options import _FieldGroups


#: Where a session remembers the add forms it already turned into tokens.
ISSUED_KEY = "runqueue_issued_tokens"
#: How many of them it remembers.
ISSUED_KEPT = 20


class ApiTokenForm(forms.ModelForm):
    """The add form carries a one-time id: reloading the "token created"
    page posts it again, and that must not mint a second live token."""

    issue_nonce = forms.CharField(
        widget=forms.HiddenInput, required=False, initial=lambda: uuid.uuid4().hex
    )

    class Meta:
        model = ApiToken
        # The admin passes the fields of each page (get_fields).
        fields = ("name", "user", "tenant")
        help_texts = {
            "submit_quota": "Writes allowed per window: submits, cancels, signals and answers "
            "each count. Empty for no quota; 0 stops every write (reads stay allowed).",
        }


@admin.register(ApiToken)
class ApiTokenAdmin(secrets.ShowsSecretOnAdd, NoBulkDelete, GuardedAdmin):
    # Short headers and values: every column fits a 1366 px screen.
    list_display = (
        "__str__",
        "user",
        "tenant",
        "ceiling",
        "quota",
        "prefix",
        "created",
        "last_used",
        "revoked",
    )
    list_filter = ("tenant", "revoked_at")
    search_fields = ("name", "prefix", "user__username", "tenant")
    raw_id_fields = ("user",)  # where the user model has no searchable admin

    def get_autocomplete_fields(self, request: HttpRequest) -> tuple[str, ...]:
        """Pick the user by searching names where the site's user admin can
        search (Django's own can), rather than typing a raw id."""
        user_admin = self.admin_site._registry.get(ApiToken._meta.get_field("user").related_model)
        return ("user",) if user_admin is not None and user_admin.search_fields else ()

    actions = ("revoke_tokens",)
    form = ApiTokenForm

    #: What staff may change on a live token: what it may submit.
    LIMITS = ["max_priority_class", "submit_quota", "submit_window_seconds"]

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> _FieldGroups:
        if obj is None:
            return ["name", "user", "tenant", *self.LIMITS, "issue_nonce"]
        return [
            "name",
            "user",
            "tenant",
            *self.LIMITS,
            "prefix",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        if obj is None:
            return []
        # A token's owner and tenant are what it grants: issue a new one instead.
        return ["user", "tenant", "prefix", "created_at", "last_used_at", "revoked_at"]

    @admin.display(description="up to class", ordering="max_priority_class")
    def ceiling(self, obj: ApiToken) -> str:
        return obj.get_max_priority_class_display()

    @admin.display(description="quota")
    def quota(self, obj: ApiToken) -> str:
        if obj.submit_quota is None:
            return "none"
        return f"{obj.submit_quota} per {obj.submit_window_seconds} s"

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: ApiToken) -> str:
        return display.age(obj.created_at) + " ago"

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, obj: ApiToken) -> str:
        return "never" if obj.last_used_at is None else display.age(obj.last_used_at) + " ago"

    @admin.display(boolean=True, description="revoked")
    def revoked(self, obj: ApiToken) -> bool:
        return obj.revoked_at is not None

    def save_model(
        self, request: HttpRequest, obj: ApiToken, form: forms.BaseForm, change: bool
    ) -> None:
        if not change:
            secrets.made(request, tokens.assign_secret(obj))
        super().save_model(request, obj, form, change)
        nonce = form.cleaned_data.get("issue_nonce") if not change else None
        if nonce:
            issued = dict(request.session.get(ISSUED_KEY, {}))
            issued[nonce] = obj.pk
            request.session[ISSUED_KEY] = dict(list(issued.items())[-ISSUED_KEPT:])

    def add_view(
        self,
        request: HttpRequest,
        form_url: str = "",
        extra_context: dict[str, object] | None = None,
    ) -> HttpResponse:
        """A form posted again (a reload of the page that showed the token)
        goes to the token it made, with no new token and no secret."""
        nonce = request.POST.get("issue_nonce", "") if request.method == "POST" else ""
        issued = request.session.get(ISSUED_KEY, {}) if nonce else {}
        if nonce in issued:
            self.message_user(
                request,
                "This form already created this token, and its secret was shown once: a reload "
                "creates no other. If the secret was lost, revoke the token and add a new one.",
                messages.WARNING,
            )
            return redirect(reverse("admin:runqueue_apitoken_change", args=[issued[nonce]]))
        return super().add_view(request, form_url, extra_context)

    def secret_made(self, request: HttpRequest, obj: ApiToken, secret: str) -> HttpResponse:
        return secrets.shown_once(
            self,
            request,
            "admin/runqueue/apitoken/token_created.html",
            {"token": obj, "raw_token": secret, "title": "API token created"},
        )

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = 0
        for token in queryset.filter(revoked_at__isnull=True):
            tokens.revoke(token)
            revoked += 1
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
