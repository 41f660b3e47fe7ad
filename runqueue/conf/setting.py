"""One row of the settings table: a ``RUNQUEUE`` key's kind, default,
meaning and the checks that look at it. Apart from ``runqueue.conf.table``
so that the topic modules declaring the rows (``table_workers`` and its
siblings) and the table assembling them both import it from below."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from runqueue.conf import values as v


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One key of the ``RUNQUEUE`` dict."""

    name: str
    kind: v.Kind
    #: What the settings object holds when the key is left out.
    default: object
    #: One line for the reference.
    doc: str
    #: The reference's heading it is listed under.
    section: str
    #: The default as a project writes it, where that differs from ``default``.
    shown: str | None = None
    #: The system checks (besides runqueue.E002, a malformed value) about it.
    checks: tuple[str, ...] = ()


#: The default of a mapping key left out (read-only, shared by every row).
EMPTY: MappingProxyType[object, object] = MappingProxyType({})
