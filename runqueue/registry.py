"""Handlers by kind: ``@runqueue.handler("kind")``, lookup and discovery.

The worker dispatches only through this registry, never through a dotted
path stored in the database.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TypeVar

from django.utils.module_loading import autodiscover_modules

from runqueue.errors import UnknownKind
from runqueue.limits import KIND_MAX_LENGTH
from runqueue.types import JSON

#: A handler: called with the run's context, it returns the run's result (a
#: JSON value) or ``AskUser``.
type Handler = Callable[..., JSON]
F = TypeVar("F", bound=Handler)

_handlers: dict[str, Handler] = {}


def handler(kind: str) -> Callable[[F], F]:
    """Register ``fn(ctx)`` as the handler of runs of this kind."""
    if not isinstance(kind, str) or not kind or len(kind) > KIND_MAX_LENGTH:
        raise ValueError(f"a handler kind is a 1-{KIND_MAX_LENGTH} character string, got {kind!r}")

    def register(fn: F) -> F:
        existing = _handlers.get(kind)
        if existing is not None and _name(existing) != _name(fn):
            raise ValueError(f"kind {kind!r} is already handled by {_name(existing)}")
        _handlers[kind] = fn
        return fn

    return register


def _name(fn: Handler) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def lookup(kind: str) -> Handler:
    try:
        return _handlers[kind]
    except KeyError:
        raise UnknownKind(kind) from None


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
