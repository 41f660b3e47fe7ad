"""Every admin URL of runqueue's ModelAdmins answers a hostile query string
without a 500.

PostgreSQL refuses text holding a NUL character, so ``?kind=%00`` reached
the database as a filter and failed there; a 10 KB filter value is no
name any column holds. Rather than teach every filter and every custom view
(bulk pages, schedule operations, resolve) the same check, ``GuardedAdmin``
wraps each URL its admin serves: a parameter whose name or value holds a
NUL or is longer than ``MAX_PARAMETER`` is dropped, staff are told which
one and why, and the same page is asked for again without it. A path value
holding a NUL answers 404. Values of the right shape but the wrong content
(a non-number for a number, an id of nothing) are each view's to refuse.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern

#: The longest query parameter (name or value) an admin page reads: longer
#: than any tenant, kind, search term or date the lists filter on.
MAX_PARAMETER = 1000


def problems(request: HttpRequest) -> list[tuple[str, str]]:
    """(parameter name, why it is refused) for each unusable query parameter."""
    found = []
    for name, values in request.GET.lists():
        for text in (name, *values):
            if "\x00" in text:
                found.append((name, "null characters are not allowed"))
                break
            if len(text) > MAX_PARAMETER:
                found.append((name, f"longer than {MAX_PARAMETER:,} characters"))
                break
    return found


def guarded(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The view, behind the query-string and path-value checks."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        for value in (*args, *kwargs.values()):
            if isinstance(value, str) and ("\x00" in value or len(value) > MAX_PARAMETER):
                raise Http404("No such object.")
        refused = problems(request)
        if not refused:
            return view(request, *args, **kwargs)
        query = request.GET.copy()
        for name, why in refused:
            query.pop(name, None)
            messages.error(request, f"Ignored the query parameter {name[:40]!r}: {why}.")
        encoded = query.urlencode()
        return HttpResponseRedirect(request.path + (f"?{encoded}" if encoded else ""))

    return wrapper


class GuardedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose every URL (its own and those subclasses add) is guarded."""

    @property
    def urls(self) -> list[URLPattern]:
        return [
            URLPattern(p.pattern, guarded(p.callback), p.default_args, p.name)
            for p in self.get_urls()
        ]
