"""A session's page in the admin (``run/session/?tenant=...&id=...``):
its newest turns in submit order with how each ended, its active run and
its line, and what it spent: ``runqueue.session`` read at one moment,
shown. Linked from a run page's Session section. The tenant and session
are query parameters, so no character of either breaks the URL."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from runqueue.admin import permissions
from runqueue.errors import InvalidArgument
from runqueue.history import usage
from runqueue.reads import sessions

#: Turns the page shows at once.
PAGE = 50


def session_url(tenant: str, session_id: str, before: str | None = None) -> str:
    """The session page of ``session_id`` in ``tenant`` (``before``: a page back)."""
    query = {"tenant": tenant, "id": session_id}
    if before is not None:
        query["before"] = before
    return f"{reverse('admin:runqueue_run_session')}?{urlencode(query)}"


def view(model_admin: ModelAdmin, request: HttpRequest) -> HttpResponse:
    """The page; staff who may view runs may view it."""
    if not permissions.may_view(request):
        raise PermissionDenied
    tenant = request.GET.get("tenant", "")
    session_id = request.GET.get("id", "")
    if not tenant or not session_id:
        raise Http404("Name a tenant and a session.")
    try:
        read = sessions.session(
            session_id, tenant=tenant, limit=PAGE, before=request.GET.get("before")
        )
    except InvalidArgument:
        raise Http404("No such page of the session.") from None
    if read is None:
        raise Http404("No run of this session.")
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": f"Session {session_id}",
        "opts": model_admin.opts,
        "read": read,
        "cost": usage.text(read.usage.cost),
        "older": session_url(tenant, session_id, read.older) if read.older else None,
        "newest": session_url(tenant, session_id) if request.GET.get("before") else None,
    }
    return TemplateResponse(request, "admin/runqueue/run/session.html", context)
