"""Handlers by kind: ``@runqueue.handler("kind")``, lookup and discovery.

The worker dispatches only through this registry, never through a dotted
path stored in the database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TypeVar

from django.utils.module_loading import autodiscover_modules

from runqueue.errors import UnknownKind
from runqueue.limits import KIND_MAX_LENGTH
from runqueue.types import JSON
from runqueue.validation import duration

#: A handler: called with the run's context, it returns the run's result (a
#: JSON value) or ``AskUser``.
type Handler = Callable[..., JSON]
F = TypeVar("F", bound=Handler)

_handlers: dict[str, Handler] = {}


@dataclass(frozen=True, slots=True)
class KindOptions:
    """A kind's defaults for its runs, in seconds (None: the project's
    ``RUNQUEUE`` setting): docs/decisions.md, "Run deadlines"."""

    start_within: float | None = None
    max_duration: float | None = None


_options: dict[str, KindOptions] = {}


def handler(
    kind: str,
    *,
    start_within: float | dt.timedelta | None = None,
    max_duration: float | dt.timedelta | None = None,
) -> Callable[[F], F]:
    """Register ``fn(ctx)`` as the handler of runs of this kind, with the
    kind's default ``start_within`` and ``max_duration`` (a submit's own win)."""
    if not isinstance(kind, str) or not kind or len(kind) > KIND_MAX_LENGTH:
        raise ValueError(f"a handler kind is a 1-{KIND_MAX_LENGTH} character string, got {kind!r}")
    start_seconds, problem = duration(start_within)
    if problem is not None:
        raise ValueError(f"start_within of kind {kind!r} {problem}")
    duration_seconds, problem = duration(max_duration)
    if problem is not None:
        raise ValueError(f"max_duration of kind {kind!r} {problem}")
    options = KindOptions(start_within=start_seconds, max_duration=duration_seconds)

    def register(fn: F) -> F:
        existing = _handlers.get(kind)
        if existing is not None and _name(existing) != _name(fn):
            raise ValueError(f"kind {kind!r} is already handled by {_name(existing)}")
        _handlers[kind] = fn
        _options[kind] = options
        return fn

    return register


def _name(fn: Handler) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def lookup(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise UnknownKind(kind) from None


def options(kind: str) -> KindOptions:
    """The kind's defaults (none for a kind without a handler)."""
    return _options.get(kind, _NO_OPTIONS)


_NO_OPTIONS = KindOptions()


def is_registered(kind: str) -> bool:
    return kind in _handlers


def kinds() -> list[str]:
    return sorted(_handlers)


def kind_choices() -> list[tuple[str, str]]:
    """The registered kinds as form choices, read each time a form is made."""
    return [(k, k) for k in kinds()]


def autodiscover() -> None:
    """Import every installed app's ``handlers`` module and RUNQUEUE["HANDLER_MODULES"]."""
    from runqueue.conf import get_settings

    autodiscover_modules("handlers")
    for module in get_settings().HANDLER_MODULES:
        import_module(module)
