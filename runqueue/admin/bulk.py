"""Bulk actions on every run a changelist filter matches, not only the page.

"Requeue all matching" / "Cancel all matching" open a page that counts the
runs the action can change under the same filters (capped, as the lists
are), and asks staff to type that count. The action then goes through
``runqueue.history.bulk`` in batches: each run is changed by the service function,
audited by its run event and a LogEntry, and a run that cannot be changed
is reported and left.
"""

from __future__ import annotations

import uuid

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from runqueue.admin import pagination
from runqueue.admin.actions import PAST, actor, explain, log_change, staff_id
from runqueue.errors import PERMANENT
from runqueue.history import bulk

#: Refusals listed one by one after a bulk action; the rest are counted.
REPORT_LIMIT = 20
#: Query parameters of a changelist that are not filters.
NOT_FILTERS = {"p", "e", "o", "_changelist_filters", "all"}
LABELS = {"requeue": "Requeue all matching", "cancel": "Cancel all matching"}


def filters_of(request: HttpRequest) -> str:
    """The changelist's filters and search, as a query string."""
    query = request.GET.copy()
    for name in NOT_FILTERS:
        query.pop(name, None)
    return query.urlencode()


class OperatorMixin(admin.ModelAdmin):
    """Bulk pages for a run changelist (``bulk_verbs``). Mixed into the run
    ModelAdmins (first, so its ``changelist_view`` wraps theirs), whose
    ``has_<verb>_permission`` say who may use them."""

    bulk_verbs: tuple[str, ...] = ("requeue", "cancel")

    def bulk_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.bulk_view)
        opts = self.model._meta
        return [path("bulk/<str:verb>/", view, name=f"{opts.app_label}_{opts.model_name}_bulk")]

    def _may(self, request: HttpRequest, verb: str) -> bool:
        return verb in self.bulk_verbs and getattr(self, f"has_{verb}_permission")(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        opts = self.model._meta
        query = filters_of(request)
        links = [
            (
                LABELS[verb],
                reverse(f"admin:{opts.app_label}_{opts.model_name}_bulk", args=[verb])
                + (f"?{query}" if query else ""),
            )
            for verb in self.bulk_verbs
            if self._may(request, verb)
        ]
        extra_context = {**(extra_context or {}), "rq_bulk": links}
        return super().changelist_view(request, extra_context)

    def bulk_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        if verb not in bulk.VERBS or not self._may(request, verb):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("These filters are not valid for this list.")
        queryset = bulk.actionable(changelist.queryset, verb).order_by()
        cap = pagination.COUNT_CAP
        ids = list(queryset.values_list("pk", flat=True)[: cap + 1])
        count = len(ids)
        reason = request.POST.get("reason", "").strip()
        error = ""
        if request.method == "POST":
            typed = request.POST.get("typed_count", "").strip().replace(",", "")
            if count > cap:
                error = f"More than {cap:,} runs match: narrow the filters."
            elif typed != str(count):
                error = f"Type {count} to confirm: that many runs match now."
            elif verb == "cancel" and not reason:
                error = "A reason is required."
            elif count > self.list_per_page:
                return self._bulk_in_background(request, verb, ids, reason)
            else:
                return self._bulk_apply(request, verb, ids, reason)
        permanent = 0
        if verb == "requeue" and 0 < count <= cap:
            # Warn as the single run's page does: these will fail the same way.
            permanent = (
                self.model._default_manager.filter(pk__in=ids)
                .filter(failure__classification=PERMANENT)
                .count()
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{LABELS[verb]}?",
            "permanent": permanent,
            "verb": verb,
            "count": count,
            "capped": count > cap,
            "cap": cap,
            "filters": [(k, v) for k, values in request.GET.lists() for v in values],
            "query": filters_of(request),
            "reason": reason,
            "reason_required": verb == "cancel",
            "error": error,
        }
        return TemplateResponse(request, "admin/runqueue/run/bulk_confirm.html", context)

    def _bulk_in_background(
        self, request: HttpRequest, verb: str, ids: list[uuid.UUID], reason: str
    ) -> HttpResponse:
        """More runs than a page: a maintenance run does it, so the request
        cannot time out; its page shows the progress (checkpoints, events)."""
        action = bulk.BulkAction(verb, actor(request), reason)
        run = bulk.submit_in_background(ids, action, user_id=staff_id(request))
        self.message_user(
            request,
            f"{LABELS[verb]}: {len(ids):,} run(s) will be {PAST[verb]} in the background by "
            f"maintenance run {run.id}. This page shows its progress (its checkpoints and "
            "events); each run changed gets its own event and admin history entry.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:runqueue_run_change", args=[run.pk]))

    def _bulk_apply(
        self, request: HttpRequest, verb: str, ids: list[uuid.UUID], reason: str
    ) -> HttpResponse:
        action = bulk.BulkAction(verb, actor(request), reason)
        message = action.history_message("bulk")
        result = bulk.apply(
            ids, action, after_batch=lambda runs: log_change(request, runs, message)
        )
        self.message_user(
            request,
            f"{PAST[verb].capitalize()} {result.done:,} of {len(ids):,} matching run(s).",
            messages.SUCCESS if not result.refused else messages.WARNING,
        )
        for run_id, exc in result.refused[:REPORT_LIMIT]:
            self.message_user(request, explain(exc, verb, run_id), messages.ERROR)
        if len(result.refused) > REPORT_LIMIT:
            self.message_user(
                request,
                f"… and {len(result.refused) - REPORT_LIMIT:,} more run(s) left as they were.",
                messages.ERROR,
            )
        opts = self.model._meta
        query = filters_of(request)
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        return HttpResponseRedirect(url + (f"?{query}" if query else ""))
