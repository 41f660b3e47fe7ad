"""Changelist filters that stay on indexes, or off the table entirely.

Django's default field filters list every distinct value (a full scan on a
million runs). These offer their choices from the registry, the enum, or a
skip scan over an index.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import ModelAdmin
from django.db import connection
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from runqueue import registry
from runqueue.errors import LEASE_EXPIRED, PERMANENT, TRANSIENT
from runqueue.models import PriorityClass, Run
from runqueue.sql import execute

#: How many tenants the tenant filter offers; search finds the rest.
TENANT_CHOICES = 50


class PriorityClassFilter(admin.SimpleListFilter):
    """A class is a priority range, so filter on the range (the claim index)."""

    title = "class"
    parameter_name = "class"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [(str(c.value), c.label) for c in PriorityClass]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        value = self.value()
        if value not in {str(c.value) for c in PriorityClass}:
            return None
        low, high = PriorityClass(int(value)).bounds
        return queryset.filter(priority__gte=low, priority__lte=high)


class KindFilter(admin.SimpleListFilter):
    """Kinds come from the handler registry, not from a DISTINCT over runs."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [(kind, kind) for kind in registry.kinds()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(kind=self.value()) if self.value() else None


class TenantFilter(admin.SimpleListFilter):
    """Tenants from a skip scan of the (tenant, session_id) index."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        with connection.cursor() as cursor:
            rows = execute(cursor, "admin_tenants", {"limit": TENANT_CHOICES}).fetchall()
        return [(tenant, tenant) for (tenant,) in rows]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(tenant=self.value()) if self.value() else None


class FailureFilter(admin.SimpleListFilter):
    """The dead letter's classification: permanent, transient, lease expired."""

    title = "failure"
    parameter_name = "failure"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [
            (PERMANENT, "Permanent error"),
            (TRANSIENT, "Transient, out of attempts"),
            (LEASE_EXPIRED, "Lease expired, out of attempts"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if not self.value():
            return None
        return queryset.filter(Q(failure__classification=self.value()))
