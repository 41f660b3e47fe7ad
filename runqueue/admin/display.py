"""How runs look in the admin: status badges, ages, JSON and tracebacks.

Everything user-controlled goes through ``format_html`` or a template, so a
payload or an error message can never inject markup.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable

from django.contrib import admin
from django.db.models import Model
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from runqueue.types import JSON

#: Characters of JSON shown before truncation: rendering a multi-megabyte
#: payload is a denial of service of its own.
JSON_LIMIT = 4000

#: One colour per run status, wherever the admin shows one: the status badge
#: of every list and page, and the dashboard's bars. Dark enough for text on
#: white (WCAG AA), so a bar and its badge read as the same status.
STATUS_COLOURS = {
    "queued": "#417690",
    "running": "#2e7d32",
    "waiting_for_user": "#8e6c00",
    "waiting": "#6a5acd",
    "pending": "#00695c",
    "succeeded": "#5b6b73",
    "failed": "#ba2121",
    "cancelled": "#6d4c41",
}


def status_badge(status: str, label: str) -> SafeString:
    colour = STATUS_COLOURS.get(status, "#666")
    return format_html(
        '<span class="rq-status rq-status-{}" style="color:{};font-weight:bold">{}</span>',
        status,
        colour,
        label,
    )


#: Where a dotted or dashed name may wrap in a narrow column: after these.
_BREAKS = re.compile(r"(?<=[.:_/-])")


def wrappable(text: str) -> SafeString:
    """``text`` escaped, with a line-break opportunity (<wbr>) after each
    . : _ / -, so 'demo.agent_turn' wraps as 'demo.' 'agent_turn', not mid-word."""
    return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in _BREAKS.split(text)))


def short(value: str | None, limit: int) -> SafeString | str:
    """A long value cut to ``limit`` characters, the whole of it in a title
    (hover) so a long session id or kind does not push columns off screen."""
    if value is None or value == "":
        return "-"
    if len(value) <= limit:
        return format_html('<span class="rq-short">{}</span>', wrappable(value))
    return format_html(
        '<span class="rq-short" title="{}">{}…</span>', value, wrappable(value[: limit - 1])
    )


def uncertain_marker(count: int | None = None) -> SafeString:
    """The sign that a run has tool calls nobody knows happened (unresolved)."""
    what = (
        f"{count} tool invocation(s) may or may not have happened"
        if count
        else "a tool invocation may or may not have happened"
    )
    return format_html(
        '<span class="rq-uncertain-marker" title="{}: resolve it in Uncertain runs" '
        'style="color:#8e6c00;background:#fff3cd;font-weight:bold;padding:0 4px;'
        'white-space:nowrap">⚠ uncertain</span>',
        what,
    )


def age(since: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """A short human age: '3 minutes', '2 days'."""
    if since is None:
        return "-"
    return timesince(since, now or timezone.now(), depth=1)


def age_column(field: str, description: str) -> Callable[[admin.ModelAdmin, Model], str]:
    """A list's column headed ``description``: how long ago the row's
    ``field`` (a time) was, sorted by it."""

    @admin.display(description=description, ordering=field)
    def column(_admin: admin.ModelAdmin, row: Model) -> str:
        return age(getattr(row, field))

    return column


def duration(value: dt.timedelta | None) -> str:
    """'850 ms', '42 s', '7 min', '3 h 5 min': a wait at a glance."""
    if value is None:
        return "-"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:.0f} min"


def pretty_json(value: JSON, limit: int = JSON_LIMIT) -> SafeString:
    """Indented JSON in a <pre>, truncated at ``limit`` characters."""
    if value is None:
        return format_html("<span>{}</span>", "-")
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) > limit:
        text = f"{text[:limit]}\n… truncated ({len(text) - limit} more characters)"
    return format_html('<pre class="rq-json">{}</pre>', text)
