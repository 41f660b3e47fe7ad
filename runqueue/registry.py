"""Handlers by kind and version: ``@runqueue.handler("kind", version=N)``,
lookup and discovery.

The worker dispatches only through this registry, never through a dotted
path stored in the database. A kind may have several versions registered
at once (the code a run was pinned to and its successor, during a rolling
deploy); ``served()`` is what this process's claims ask for
(docs/decisions/run-trees.md, "Versions and rolling deploys").
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import TypeVar

from django.utils.module_loading import autodiscover_modules

from runqueue.errors import UnknownKind
from runqueue.limits import KIND_MAX_LENGTH
from runqueue.sql import array_literal
from runqueue.types import JSON
from runqueue.validation import duration

#: A handler: called with the run's context, it returns the run's result (a
#: JSON value) or ``AskUser``.
type Handler = Callable[..., JSON]
F = TypeVar("F", bound=Handler)

#: The highest handler version (a run's ``handler_version`` is an integer column).
VERSION_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class KindOptions:
    """A kind's defaults for its runs, in seconds (None: the project's
    ``RUNQUEUE`` setting): docs/decisions/sessions.md, "Run deadlines"."""

    start_within: float | None = None
    max_duration: float | None = None
    #: ``on_busy="debounce"``'s window and longest wait, when a submit
    #: gives none (docs/decisions/sessions.md, "Busy sessions: on_busy").
    debounce: float | None = None
    debounce_max: float | None = None


@dataclass(frozen=True, slots=True)
class Registration:
    """One version of a kind's handler, and the older versions whose runs it
    takes over at a turn boundary."""

    fn: Handler
    version: int
    migrate_from: tuple[int, ...]
    options: KindOptions


#: {kind: {version: Registration}}
_handlers: dict[str, dict[int, Registration]] = {}
_lock = threading.Lock()
_served: Served | None = None


@dataclass(frozen=True, slots=True)
class Served:
    """What this process's workers claim, as the claim's parameters: its
    kinds with each one's newest version, every (kind, version) it has, and
    the moves it makes at a turn boundary (an older version's run to the
    newest version that names it in ``migrate_from``)."""

    kinds: tuple[str, ...]
    newest: tuple[int, ...]
    versions: tuple[str, ...]
    moves: tuple[str, ...]
    move_to: tuple[int, ...]

    @classmethod
    def build(cls, handlers: Mapping[str, Mapping[int, Iterable[int]]]) -> Served:
        """From {kind: {version: the versions it migrates from}}: what a
        worker with those handlers claims."""
        names = sorted(k for k, versions in handlers.items() if versions)
        moves: dict[str, int] = {}
        for kind in names:
            for version in sorted(handlers[kind]):
                for old in handlers[kind][version]:
                    # The newest version that names an older one takes its runs.
                    moves[pair(kind, old)] = version
        return cls(
            kinds=tuple(names),
            newest=tuple(max(handlers[k]) for k in names),
            versions=tuple(pair(k, v) for k in names for v in sorted(handlers[k])),
            moves=tuple(moves),
            move_to=tuple(moves.values()),
        )

    #: The claim's parameters, made once (``params``).
    literals: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        literals = {
            "kinds": array_literal(self.kinds),
            "kind_newest": array_literal(self.newest),
            "kind_versions": array_literal(self.versions),
            "kind_moves": array_literal(self.moves),
            "kind_move_to": array_literal(self.move_to),
        }
        object.__setattr__(self, "literals", literals)

    def params(self) -> dict[str, str]:
        """The claim's parameters as array literals (``runqueue.sql.array_literal``):
        the same on every claim of the process, so made once."""
        return self.literals

    def row(self) -> dict[str, dict[str, object]]:
        """The worker row's ``kinds``: {kind: {"versions": [1, 2], "moves":
        {"1": 2}}} (a run pinned to 1 moves to 2 at a turn boundary)."""
        row: dict[str, dict[str, object]] = {}
        for kind in self.kinds:
            versions = sorted(int(v.rpartition(":")[2]) for v in self.versions if _of(v, kind))
            moves = {
                m.rpartition(":")[2]: to
                for m, to in zip(self.moves, self.move_to, strict=True)
                if _of(m, kind)
            }
            row[kind] = {"versions": versions, "moves": moves}
        return row


def _of(pair: str, kind: str) -> bool:
    return pair.rpartition(":")[0] == kind


def pair(kind: str, version: int) -> str:
    """A (kind, version) as the claim compares it: ``kind:version`` (the
    version is an integer, so the last colon splits it)."""
    return f"{kind}:{version}"


def handler(
    kind: str,
    *,
    version: int = 1,
    migrate_from: Iterable[int] = (),
    start_within: float | dt.timedelta | None = None,
    max_duration: float | dt.timedelta | None = None,
    debounce: float | dt.timedelta | None = None,
    debounce_max: float | dt.timedelta | None = None,
) -> Callable[[F], F]:
    """Register ``fn(ctx)`` as version ``version`` of the handler of runs of
    this kind, with the kind's default ``start_within`` and ``max_duration``
    (a submit's own win). A run is pinned to the version that first claimed
    it; ``migrate_from`` names older versions whose runs this version takes
    over when they are between turns (docs/decisions/run-trees.md, "Versions and
    rolling deploys")."""
    if not isinstance(kind, str) or not kind or len(kind) > KIND_MAX_LENGTH:
        raise ValueError(f"a handler kind is a 1-{KIND_MAX_LENGTH} character string, got {kind!r}")
    if not _is_version(version):
        raise ValueError(f"version of kind {kind!r} must be an integer from 1 to {VERSION_MAX}")
    moves = _migrate_from(kind, version, migrate_from)
    start_seconds, problem = duration(start_within)
    if problem is not None:
        raise ValueError(f"start_within of kind {kind!r} {problem}")
    duration_seconds, problem = duration(max_duration)
    if problem is not None:
        raise ValueError(f"max_duration of kind {kind!r} {problem}")
    windows = {}
    for name, value in (("debounce", debounce), ("debounce_max", debounce_max)):
        windows[name], problem = duration(value)
        if problem is not None:
            raise ValueError(f"{name} of kind {kind!r} {problem}")
    options = KindOptions(start_within=start_seconds, max_duration=duration_seconds, **windows)

    def register(fn: F) -> F:
        global _served
        with _lock:
            existing = _handlers.get(kind, {}).get(version)
            if existing is not None and _name(existing.fn) != _name(fn):
                raise ValueError(
                    f"kind {kind!r} version {version} is already handled by {_name(existing.fn)}"
                )
            _handlers.setdefault(kind, {})[version] = Registration(fn, version, moves, options)
            _served = None
        return fn

    return register


def _is_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= VERSION_MAX


def _migrate_from(kind: str, version: int, migrate_from: Iterable[int]) -> tuple[int, ...]:
    if isinstance(migrate_from, int | str):
        raise ValueError(
            f"migrate_from of kind {kind!r} is a list of versions, got {migrate_from!r}"
        )
    moves = tuple(migrate_from)
    for old in moves:
        if not _is_version(old) or old >= version:
            raise ValueError(
                f"migrate_from of kind {kind!r} version {version} names older versions "
                f"(integers from 1 to {version - 1}), got {old!r}"
            )
    return tuple(sorted(set(moves)))


def unregister(kind: str, version: int | None = None) -> None:
    """Forget a kind (every version, or one): for tests and tools that
    register handlers for a while."""
    global _served
    with _lock:
        if version is None:
            _handlers.pop(kind, None)
        elif kind in _handlers:
            _handlers[kind].pop(version, None)
            if not _handlers[kind]:
                del _handlers[kind]
        _served = None


def _name(fn: Handler) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def lookup(kind: str, version: int | None = None) -> Handler:
    """The handler of ``kind`` at ``version`` (None: the newest); UnknownKind
    when this process has no such handler."""
    return registration(kind, version).fn


def registration(kind: str, version: int | None = None) -> Registration:
    versions = _handlers.get(kind)
    if not versions:
        raise UnknownKind(kind)
    if version is None:
        return versions[max(versions)]
    try:
        return versions[version]
    except KeyError:
        raise UnknownKind(kind, version) from None


def newest(kind: str) -> int:
    """The newest version of ``kind`` registered here (UnknownKind without one)."""
    return registration(kind).version


def versions(kind: str) -> list[int]:
    """The versions of ``kind`` registered here, oldest first."""
    return sorted(_handlers.get(kind, {}))


def options(kind: str) -> KindOptions:
    """The kind's defaults: its newest version's (none for a kind without a handler)."""
    versions = _handlers.get(kind)
    return versions[max(versions)].options if versions else _NO_OPTIONS


_NO_OPTIONS = KindOptions()


def is_registered(kind: str) -> bool:
    return bool(_handlers.get(kind))


def kinds() -> list[str]:
    return sorted(k for k, versions in _handlers.items() if versions)


def kind_choices() -> list[tuple[str, str]]:
    """The registered kinds as form choices, read each time a form is made."""
    return [(k, k) for k in kinds()]


def served() -> Served:
    """This process's kinds and versions as the claim asks for them (built
    once per change of the registry)."""
    global _served
    with _lock:
        if _served is None:
            _served = _build_served()
        return _served


def _build_served() -> Served:
    return Served.build(
        {
            kind: {version: r.migrate_from for version, r in versions.items()}
            for kind, versions in _handlers.items()
        }
    )


def autodiscover() -> None:
    """Import every installed app's ``handlers`` module and RUNQUEUE["HANDLER_MODULES"]."""
    from runqueue.conf import get_settings

    autodiscover_modules("handlers")
    for module in get_settings().HANDLER_MODULES:
        import_module(module)


# Event triggers declared in code: ``@runqueue.on_event(name, match=...)``.


@dataclass(frozen=True, slots=True)
class CodeTrigger:
    """A trigger declared in code: each inbound event ``name`` whose data
    contains ``match`` starts a run of ``kind`` (or of the kind ``fn`` is
    registered under), its payload ``payload(event)`` or the event itself."""

    name: str
    match: Mapping[str, JSON]
    kind: str | None
    fn: Handler | None
    payload: Callable[[dict[str, JSON]], JSON] | None
    priority: int

    @property
    def label(self) -> str:
        """How the event's ``started`` list names it."""
        return f"code:{self.resolved_kind()}"

    def resolved_kind(self) -> str:
        """The kind it starts: ``kind``, else the kind its decorated handler
        is registered under (UnknownKind if none)."""
        if self.kind is not None:
            return self.kind
        for kind, versions in _handlers.items():
            if any(r.fn is self.fn for r in versions.values()):
                return kind
        raise UnknownKind(_name(self.fn) if self.fn is not None else "?")


_triggers: list[CodeTrigger] = []


def on_event(
    name: str,
    *,
    match: Mapping[str, JSON] | None = None,
    kind: str | None = None,
    payload: Callable[[dict[str, JSON]], JSON] | None = None,
    priority: int = 10,
) -> Callable[[F], F]:
    """Start a run for each inbound event ``name`` whose data contains
    ``match`` (PostgreSQL's jsonb ``@>``; None: every event of the name).
    Decorates a handler (above or below ``@runqueue.handler``), or names
    ``kind`` and is called alone. The run's payload is ``payload(event)``,
    or the event (name, key, data, received_at); its priority ``priority``
    (async by default). A repeated delivery of an event starts nothing."""
    if not isinstance(name, str) or not name or len(name) > 255:
        raise ValueError(f"an event name is a 1-255 character string, got {name!r}")
    if match is not None and not isinstance(match, Mapping):
        raise ValueError(f"an event trigger's match is a JSON object, got {match!r}")
    if payload is not None and not callable(payload):
        raise ValueError("an event trigger's payload is a callable of the event, or None")
    frozen = dict(match or {})

    def add(fn: Handler | None) -> None:
        with _lock:
            _triggers.append(CodeTrigger(name, frozen, kind, fn, payload, priority))

    if kind is not None:
        add(None)

        def named(fn: F) -> F:
            return fn

        return named

    def register(fn: F) -> F:
        add(fn)
        return fn

    return register


def event_triggers(name: str) -> list[CodeTrigger]:
    """The code triggers of event ``name``, in declaration order."""
    with _lock:
        return [t for t in _triggers if t.name == name]


def remove_event_triggers(name: str) -> None:
    """Forget the code triggers of event ``name`` (for tests)."""
    with _lock:
        _triggers[:] = [t for t in _triggers if t.name != name]
