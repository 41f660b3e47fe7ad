"""One row of the settings table: a ``RUNQUEUE`` key's kind, default,
meaning and the checks that look at it; and the form the topic modules
write rows in, a line a key (``Key``, mapped to its meaning). Apart from
``runqueue.conf.table`` so that the topic modules declaring the rows
(``table_workers`` and its siblings) and the table assembling them both
import it from below."""

from __future__ import annotations

from collections.abc import Mapping
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


@dataclass(frozen=True, slots=True, eq=False)
class Key:
    """A row as a topic module writes it: every cell of a ``Setting`` but
    its meaning, which the module maps the key to (``Keys``), and its
    heading, which ``runqueue.conf.table`` gives the topic's mapping
    (``section``). Hashed by identity: each is one row, and a default
    may be a mapping."""

    name: str
    kind: v.Kind
    default: object
    shown: str | None = None
    checks: tuple[str, ...] = ()


#: A topic's keys, each to its one-line doc, in the reference's order.
type Keys = Mapping[Key, str]


def section(heading: str, keys: Keys) -> tuple[Setting, ...]:
    """The rows of ``keys``, listed under ``heading`` in the reference."""
    return tuple(
        Setting(
            name=key.name,
            kind=key.kind,
            default=key.default,
            doc=doc,
            section=heading,
            shown=key.shown,
            checks=key.checks,
        )
        for key, doc in keys.items()
    )
