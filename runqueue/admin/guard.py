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

Its forms refuse what a column cannot hold with a form error, never a 500
(``hostile_form``): a JSON field's text that parses to something jsonb
refuses (a NUL, a lone surrogate, a number past a float such as ``1e400``,
``NaN``), an integer too long for Python to parse (5,000 digits) or text
nested too deeply to parse; and a choice of a row by a key of
the wrong type (``user=abc``), whose redisplay would look the key up again.
A permission refusal is the site's 403 page with one line in the log, not a
traceback (``refusal``).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.forms.fields import InvalidJSONInput
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, get_resolver

from runqueue import reads
from runqueue.limits import REASON_MAX_LENGTH
from runqueue.sql import without_jit
from runqueue.validation import json_problem

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


def guarded(
    view: Callable[..., HttpResponse], *, replica: bool = False
) -> Callable[..., HttpResponse]:
    """The view, behind the query-string and path-value checks; with
    ``replica``, a page whose reads may go to RUNQUEUE["READ_DATABASE"]
    (``runqueue.reads``)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        for value in (*args, *kwargs.values()):
            if isinstance(value, str) and ("\x00" in value or len(value) > MAX_PARAMETER):
                raise Http404("No such object.")
        refused = problems(request)
        if not refused:
            try:
                if request.method not in ("GET", "HEAD"):
                    response = view(request, *args, **kwargs)
                    reads.remember_write(request)
                    return response
                if replica:
                    return replica_read(view, request, *args, **kwargs)
                return read(view, request, *args, **kwargs)
            except PermissionDenied as exc:
                return refusal(request, exc)
        query = request.GET.copy()
        for name, why in refused:
            query.pop(name, None)
            messages.error(request, f"Ignored the query parameter {name[:40]!r}: {why}.")
        encoded = query.urlencode()
        return HttpResponseRedirect(request.path + (f"?{encoded}" if encoded else ""))

    return wrapper


def read(
    view: Callable[..., HttpResponse], request: HttpRequest, *args: Any, **kwargs: Any
) -> HttpResponse:
    """A page that only reads, planned without JIT (``runqueue.sql.without_jit``:
    a list's deep page or a run's tree over months of history would be
    compiled first) and rendered inside that transaction, where a template
    response runs its queries. Forms posted and actions keep their own
    transactions."""
    with without_jit(reads.read_alias()):
        response = view(request, *args, **kwargs)
        if isinstance(response, TemplateResponse) and not response.is_rendered:
            response.render()
    return response


def replica_read(
    view: Callable[..., HttpResponse], request: HttpRequest, *args: Any, **kwargs: Any
) -> HttpResponse:
    """``read`` from the replica, when one is set and fresh enough (and has
    replayed this staff member's last write); a page past
    READ_LAG_WARNING_SECONDS behind says how far."""
    with reads.for_request(request) as source:
        if (notice := source.notice()) is not None:
            messages.warning(request, notice, fail_silently=True)
        return read(view, request, *args, **kwargs)


def refusal(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    """The site's 403 page for a permission refusal, answered here rather
    than raised: raised, Django logs it with its traceback (thirty-odd lines
    for an expected answer); answered, its request log has the one line
    "Forbidden: <path>"."""
    handler: Any = get_resolver(getattr(request, "urlconf", None)).resolve_error_handler(403)
    return handler(request, exception=exc)


class StorableJSONField(forms.JSONField):
    """A form's JSON field that takes only what jsonb stores: a form error
    for a NUL or a lone surrogate in any string, a number past a float
    (``1e400`` parses to infinity), NaN, an integer past Python's digit
    limit (``json.loads`` raises ValueError, not JSONDecodeError), or text
    nested too deeply to parse.
    Redisplayed as the text staff typed, never as the parsed value."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:
            raise forms.ValidationError("Enter JSON nested less deeply.", code="invalid") from None
        except ValueError:
            # Not a JSONDecodeError, which Django turns into a form error:
            # an integer past Python's digit limit (a 5,000-digit number).
            raise forms.ValidationError(
                f"Enter a valid JSON: its integers may have at most "
                f"{sys.get_int_max_str_digits():,} digits.",
                code="invalid",
            ) from None
        if converted is not None and not self.disabled:
            _text, problem = json_problem(converted)
            if problem is not None:
                raise forms.ValidationError(f"This JSON {problem}.", code="invalid")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            parsed = json.loads(data, cls=self.decoder)
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError, a too long integer
            return InvalidJSONInput(data)
        if json_problem(parsed)[1] is not None:
            return InvalidJSONInput(data)
        return parsed


def json_area(rows: int, help_text: str) -> StorableJSONField:
    """An optional JSON field staff type into: a text area ``rows`` high."""
    return StorableJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": rows, "cols": 80}),
        help_text=help_text,
    )


def reason_field(help_text: str, *, required: bool = True) -> forms.CharField:
    """The reason staff give for an action, as long as a run's event keeps it."""
    return forms.CharField(
        required=required,
        max_length=REASON_MAX_LENGTH,
        widget=forms.TextInput(attrs={"size": 80}),
        help_text=help_text,
    )


class _BlankRefusedChoices(forms.BaseForm):
    """After validating, blank the posted key of each row choice refused."""

    def full_clean(self) -> None:
        super().full_clean()
        refused = [
            name
            for name, field in self.fields.items()
            if name in self.errors and isinstance(field, forms.ModelChoiceField)
        ]
        if refused and self.is_bound:
            posted = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict
            for name in refused:
                posted[self.add_prefix(name)] = ""
            self.data = posted


def hostile_form[F: type[forms.BaseForm]](form: F) -> F:
    """``form``, which after validating blanks the posted key of each row
    choice it refused: redisplaying a choice looks its key up (an
    autocomplete widget filters by it), and a key of the wrong type
    (``user=abc``) would fail there, after the form error was found."""
    guarded = type(form.__name__, (_BlankRefusedChoices, form), {"__module__": form.__module__})
    return cast(F, guarded)


class GuardedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose every URL (its own and those subclasses add) is
    guarded, and whose forms refuse unstorable values with a form error."""

    #: Pages (URL name suffixes: "changelist") that only list, whose reads
    #: may go to a replica; the rest (a run's page, its actions) read the
    #: primary.
    replica_pages: tuple[str, ...] = ()

    @property
    def urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}_"
        replica = {prefix + page for page in self.replica_pages}
        return [
            URLPattern(
                p.pattern, guarded(p.callback, replica=p.name in replica), p.default_args, p.name
            )
            for p in self.get_urls()
        ]

    def formfield_for_dbfield(
        self, db_field: models.Field, request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        if isinstance(db_field, models.JSONField):
            kwargs.setdefault("form_class", StorableJSONField)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        return hostile_form(super().get_form(request, obj, change=change, **kwargs))
