"""The ``RUNQUEUE`` settings dict, read lazily into a frozen dataclass.

Every key is optional and declared once, in ``runqueue.conf.table``: its
type and validation, default and meaning. docs/settings.md lists them
(``python -m runqueue.conf --reference`` writes it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from runqueue.conf.table import BY_NAME, SETTINGS
from runqueue.conf.table_http import MAX_EVENTS_PAGE_SIZE
from runqueue.conf.values import (
    ON_BUSY,
    POOLERS,
    RESERVED_KIND_PREFIXES,
    BudgetSpec,
    Price,
)

if TYPE_CHECKING:
    from runqueue.models import PriorityClass

__all__ = [
    "MAX_EVENTS_PAGE_SIZE",
    "ON_BUSY",
    "POOLERS",
    "RESERVED_KIND_PREFIXES",
    "BudgetSpec",
    "Price",
    "Settings",
    "get_settings",
    "parse",
    "register_parser",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The parsed RUNQUEUE dict: one field per row of ``table.SETTINGS``, in
    its order, holding what that row's kind parses to (its default, left
    out). What each one means: the table, or docs/settings.md."""

    LEASE_SECONDS: float
    HEARTBEAT_SECONDS: float
    SWEEP_SECONDS: float
    POLL_SECONDS: float
    GRACE_SECONDS: float
    MAX_ATTEMPTS: int
    BACKOFF_BASE_SECONDS: float
    BACKOFF_MAX_SECONDS: float
    BACKOFF_JITTER: float
    IDEMPOTENCY_KEY_RETENTION_SECONDS: float
    SUBMIT_LOCK_TIMEOUT_MS: int
    MAX_PAYLOAD_BYTES: int
    NOTIFY_CHANNEL: str
    LISTEN_DATABASE: str | None
    READ_DATABASE: str | None
    READ_LAG_WARNING_SECONDS: float
    READ_MAX_LAG_SECONDS: float | None
    PREPARED_STATEMENTS: bool | None
    POOLER: str | None
    POOLER_TRACKS_PREPARED: bool
    DURABLE_CLAIMS: bool
    HANDLER_MODULES: tuple[str, ...]
    TRANSIENT_EXCEPTIONS: tuple[str, ...]
    EMIT_MAX_BYTES: int
    SIGNAL_MAX_BYTES: int
    SIGNALS_KEPT_MAX: int
    STREAM_TEXT_FLUSH_MS: int
    STREAM_TEXT_FLUSH_BYTES: int
    TERMINAL_RUN_RETENTION_SECONDS: float | None
    START_WITHIN_SECONDS: float | None
    MAX_DURATION_SECONDS: float | None
    SESSION_ON_BUSY: str
    SESSION_MAX_PENDING: int | None
    API_MAX_BODY_BYTES: int
    API_SESSION_TENANT: str
    API_EVENTS_PAGE_SIZE: int
    API_KINDS: tuple[str, ...]
    #: A class index (``PriorityClass.index``), from the class's slug.
    API_SESSION_MAX_PRIORITY_CLASS: int
    STREAM_MAX_PER_PROCESS: int
    STREAM_MAX_PER_TOKEN: int | None
    STREAM_MAX_PER_TENANT: int | None
    STREAM_KEEPALIVE_SECONDS: float
    STREAM_POLL_SECONDS: float
    STREAM_MAX_SECONDS: float
    #: The default cap per class (a class missing or None: no cap).
    CONCURRENCY: Mapping[PriorityClass, int | None]
    BUDGETS: Mapping[str, BudgetSpec]
    PRICES: Mapping[str, Price]
    #: ``runqueue.schedules.spec.ScheduleSpec``s; that module's
    #: ``configured()`` reads them typed (this layer does not name it).
    SCHEDULES: tuple[Any, ...]
    API_SCHEDULES_PER_TOKEN: int | None
    HANDLER_SCHEDULES_PER_TENANT: int | None
    API_EVENTS: tuple[str, ...]
    EVENT_MAX_BYTES: int
    EVENT_RETENTION_SECONDS: float
    #: {event name: a dotted path or a callable (headers, raw body) -> bool}.
    EVENT_VERIFIERS: Mapping[str, object]
    #: {event name: the body member holding its key}.
    EVENT_KEY_FIELDS: Mapping[str, str]
    METRICS_TOKEN: str | None
    TRACE_GENAI: bool
    WEBHOOK_ALLOW_HOSTS: tuple[str, ...]
    WEBHOOK_TIMEOUT_SECONDS: float
    WEBHOOK_SECRET_OVERLAP_SECONDS: float

    @property
    def prepares(self) -> bool:
        """The hot statements are prepared on the server (PREPARED_STATEMENTS
        as set, or, left None, unless a transaction pooler cannot carry them)."""
        if self.PREPARED_STATEMENTS is not None:
            return self.PREPARED_STATEMENTS
        return self.POOLER != "transaction" or self.POOLER_TRACKS_PREPARED

    @property
    def caps_configured(self) -> bool:
        """A default cap is set for some class."""
        return any(cap is not None for cap in self.CONCURRENCY.values())

    def default_cap(self, priority_class: PriorityClass) -> int | None:
        """The cap of a key without a limit in ``priority_class`` (None: no cap)."""
        return self.CONCURRENCY.get(priority_class)


#: Settings whose values a module above this one parses (it knows what they
#: hold): ``RUNQUEUE["SCHEDULES"]`` becomes ``runqueue.schedules.spec``'s
#: specs. That module registers its parser when imported, and the app's
#: ready() imports it: this package imports nothing of runqueue's but the
#: bottom layer (models, limits).
_REGISTERED = frozenset(s.name for s in SETTINGS if s.kind.parse is None)
_PARSERS: dict[str, Callable[[object, Settings], Any]] = {}


def register_parser(name: str, parser: Callable[[object, Settings], Any]) -> None:
    """Parse ``RUNQUEUE[name]`` with ``parser`` from now on: it gets the
    value and every other setting, parsed, and raises ImproperlyConfigured
    for a bad value."""
    if name not in _REGISTERED:
        raise ValueError(f"RUNQUEUE[{name!r}] takes no registered parser")
    _PARSERS[name] = parser
    get_settings.cache_clear()


def parse(raw: object) -> Settings:
    """Validate a RUNQUEUE dict; raise ImproperlyConfigured naming the bad key."""
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"RUNQUEUE must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(BY_NAME))
    if unknown:
        raise ImproperlyConfigured(
            f"Unknown RUNQUEUE setting(s): {', '.join(map(repr, unknown))}. "
            f"Known: {', '.join(sorted(BY_NAME))}"
        )
    # Each value parsed by its own row's kind: Settings(**values) takes them.
    values: dict[str, Any] = {setting.name: setting.default for setting in SETTINGS}
    deferred: dict[str, object] = {}
    for name, value in raw.items():
        parser = BY_NAME[name].kind.parse
        if parser is None:
            deferred[name] = value  # parsed last, under the other settings
        else:
            values[name] = parser(name, value)
    settings = Settings(**values)
    if settings.HEARTBEAT_SECONDS >= settings.LEASE_SECONDS:
        raise ImproperlyConfigured(
            "RUNQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS, "
            "or every lease expires between heartbeats"
        )
    for name, value in deferred.items():
        if name not in _PARSERS:
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] was read before the runqueue app was ready "
                "(its parser is registered by the app's ready())"
            )
        settings = dataclasses.replace(settings, **{name: _PARSERS[name](value, settings)})
    return settings


@cache
def get_settings() -> Settings:
    """The current RUNQUEUE settings (cached; reset when settings change)."""
    from django.conf import settings

    return parse(getattr(settings, "RUNQUEUE", {}))


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "RUNQUEUE":
        get_settings.cache_clear()
