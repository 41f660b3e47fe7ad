"""Changelist filters that stay on indexes, or off the table entirely.

Django's default field filters list every distinct value (a full scan on a
million runs). These offer their choices from the registry, the enum, or a
skip scan over an index.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import ModelAdmin
from django.core.cache import cache
from django.db.models import Aggregate, Count, Exists, OuterRef, Q, QuerySet, Subquery, Sum
from django.http import HttpRequest

from runqueue import reads, registry
from runqueue.errors import LEASE_EXPIRED, PERMANENT, TRANSIENT
from runqueue.models import LIVE_STATUSES, PriorityClass, Run, Usage
from runqueue.sql import execute

#: How many tenants the tenant filter offers; search finds the rest.
TENANT_CHOICES = 50
#: The tenant choices are read at most this often (per cache): the skip scan
#: probes every day's partition, 20-30 ms at ten million runs, on each page.
TENANT_SECONDS = 60


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


class PausedFilter(admin.SimpleListFilter):
    """Live runs paused one by one (runqueue.pause_run): the live statuses
    first, so the read stays on the live partition."""

    title = "paused"
    parameter_name = "paused"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [("yes", "Paused")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() != "yes":
            return None
        return queryset.filter(status__in=LIVE_STATUSES, paused_at__isnull=False)


class KindFilter(admin.SimpleListFilter):
    """Kinds come from the handler registry, not from a DISTINCT over runs."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [(kind, kind) for kind in registry.kinds()]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(kind=self.value()) if self.value() else None


class TenantFilter(admin.SimpleListFilter):
    """Tenants from a skip scan of the (tenant, created_at) index, kept in
    Django's cache for TENANT_SECONDS: a tenant new in that minute is not
    offered yet (the search and ``?tenant=`` find it)."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        tenants = cache.get_or_set("runqueue:admin:tenants", _tenants, TENANT_SECONDS) or []
        return [(tenant, tenant) for tenant in tenants]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        return queryset.filter(tenant=self.value()) if self.value() else None


def _tenants() -> list[str]:
    with reads.read_connection().cursor() as cursor:  # the list's, replica or not
        return [t for (t,) in execute(cursor, "admin_tenants", {"limit": TENANT_CHOICES})]


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


def usage_columns() -> dict[str, Subquery]:
    """Per run: its recorded model calls, tokens each way, their cost and
    how many had none; each a subquery through the usage table's (run,
    epoch, call) index."""
    rows = Usage.objects.filter(run_id=OuterRef("pk")).order_by().values("run_id")

    def total(expression: Aggregate) -> Subquery:
        return Subquery(rows.annotate(v=expression).values("v")[:1])

    return {
        "usage_calls": total(Count("id")),
        "usage_input": total(Sum("input_tokens")),
        "usage_output": total(Sum("output_tokens")),
        "usage_cost": total(Sum("cost")),
        "usage_unpriced": total(Count("id", filter=Q(cost__isnull=True))),
    }


class UsageFilter(admin.SimpleListFilter):
    """Runs that recorded model calls, none, or some without a cost."""

    title = "model calls"
    parameter_name = "usage"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [
            ("recorded", "Recorded usage"),
            ("none", "No usage"),
            ("unpriced", "Some without a cost"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        recorded = Exists(Usage.objects.filter(run_id=OuterRef("pk")))
        unpriced = Exists(Usage.objects.filter(run_id=OuterRef("pk"), cost__isnull=True))
        match self.value():
            case "recorded":
                return queryset.filter(recorded)
            case "none":
                return queryset.filter(~recorded)
            case "unpriced":
                return queryset.filter(unpriced)
        return None


class ForkFilter(admin.SimpleListFilter):
    """Forks (runs forked from another), and runs that were forked."""

    title = "forks"
    parameter_name = "fork"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Run]) -> list[tuple[str, str]]:
        return [("fork", "Forks of a run"), ("forked", "Forked into others")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        match self.value():
            case "fork":
                return queryset.filter(forked_from__isnull=False)
            case "forked":
                return queryset.filter(Exists(Run.objects.filter(forked_from_id=OuterRef("pk"))))
        return None
