"""The ``RUNQUEUE`` settings dict, read lazily into a frozen dataclass.

Defaults (every key optional)::

    RUNQUEUE = {
        "LEASE_SECONDS": 30,          # a claim's lease; heartbeats renew it
        "HEARTBEAT_SECONDS": 10,      # how often a worker renews held leases
        "SWEEP_SECONDS": 5,           # how often a worker's sweeper looks for expired leases
        "POLL_SECONDS": 2,            # fallback poll when no NOTIFY arrives
        "GRACE_SECONDS": 30,          # SIGTERM: how long in-flight runs may finish
        "MAX_ATTEMPTS": 3,            # default max_attempts of a submitted run
        "BACKOFF_BASE_SECONDS": 2,    # retry delay base: base * 2**(attempts-1)
        "BACKOFF_MAX_SECONDS": 600,   # retry delay cap
        "BACKOFF_JITTER": 0.2,        # +/- fraction of random jitter on the delay
        "IDEMPOTENCY_KEY_RETENTION_SECONDS": 86400,
        "SUBMIT_LOCK_TIMEOUT_MS": 2000,  # wait on a concurrent same-key submit
        "MAX_PAYLOAD_BYTES": 1048576,  # a submitted payload's JSON size limit
        "NOTIFY_CHANNEL": "runqueue",
        "LISTEN_DATABASE": None,      # DATABASES alias LISTEN connects to (None: "default")
        "HANDLER_MODULES": [],        # extra modules to import for @handler
        "TRANSIENT_EXCEPTIONS": [],   # dotted exception classes classified transient
        "TERMINAL_RUN_RETENTION_SECONDS": None,  # prune terminal runs older than this
        "API_MAX_BODY_BYTES": 262144,  # HTTP API: larger request bodies get 413
        "API_SESSION_TENANT": "default",  # HTTP API: tenant of session-authenticated users
        "API_EVENTS_PAGE_SIZE": 100,  # HTTP API: default page of GET .../events/ (max 1000)
        "SCHEDULES": {},              # recurring runs by name: runqueue/schedules/spec.py
        "STREAM_MAX_PER_PROCESS": 4,  # open event streams per web process; more get 503
        "STREAM_MAX_PER_TOKEN": 2,    # ... per API token (or session user) per process; 429
        "STREAM_MAX_PER_TENANT": None,  # ... per tenant per process (None: no bound); 429
        "STREAM_KEEPALIVE_SECONDS": 15,  # a comment line this often keeps proxies open
        "STREAM_POLL_SECONDS": 5,     # re-read a stream's events this often without a NOTIFY
        "STREAM_MAX_SECONDS": 3600,   # close a stream after this long (clients resume)
        "EMIT_MAX_BYTES": 16384,      # ctx.emit's data size limit, as JSON
        "SIGNAL_MAX_BYTES": 65536,    # a signal's data size limit, as JSON (API: 413)
        "SIGNALS_KEPT_MAX": 100,      # signals a run's mailbox keeps at most (API: 429)
        "STREAM_TEXT_FLUSH_MS": 1000,  # ctx.stream: buffered text made durable at most this often
        "STREAM_TEXT_FLUSH_BYTES": 8192,  # ... or once this many bytes are buffered
        "METRICS_TOKEN": None,        # bearer token the metrics view requires (None: open)
        "API_KINDS": [],              # HTTP API: the kinds it may submit (others: 422)
        "API_SESSION_MAX_PRIORITY_CLASS": "async",  # HTTP API: browser sessions' ceiling
        "CONCURRENCY": {},            # class -> runs of one concurrency key running at once
        "PREPARED_STATEMENTS": None,  # hot statements prepared (None: unless POOLER forbids)
        "POOLER": None,               # what "default" goes through: None, "session", "transaction"
        "POOLER_TRACKS_PREPARED": False,  # pooler carries prepared statements (PgBouncer 1.21+)
        "BUDGETS": {},                # key -> {"requests", "tokens", "per_seconds", "shares"}
        "DURABLE_CLAIMS": False,      # a claim alone waits for the disk (True) or not (False)
        "START_WITHIN_SECONDS": None,  # not claimed this long after due: cancelled, expired
        "MAX_DURATION_SECONDS": None,  # an attempt running this long is cancelled and fails
        "PRICES": {},                 # model -> {"input": ..., "output": ...} per million tokens
        "TRACE_GENAI": False,         # gen_ai.* usage attributes on the run's span
        "SESSION_ON_BUSY": "reject",  # a submit to a busy session: reject, enqueue, interrupt,
                                      # rollback or merge (docs/decisions.md, "Busy sessions")
        "SESSION_MAX_PENDING": 10,    # pending turns a session may hold (None: no limit)
    }
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from runqueue.limits import MAX_WAIT_SECONDS, TENANT_MAX_LENGTH

if TYPE_CHECKING:
    from runqueue.models import PriorityClass
    from runqueue.schedules.spec import ScheduleSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    LEASE_SECONDS: float = 30
    HEARTBEAT_SECONDS: float = 10
    SWEEP_SECONDS: float = 5
    POLL_SECONDS: float = 2
    GRACE_SECONDS: float = 30
    MAX_ATTEMPTS: int = 3
    BACKOFF_BASE_SECONDS: float = 2
    BACKOFF_MAX_SECONDS: float = 600
    BACKOFF_JITTER: float = 0.2
    IDEMPOTENCY_KEY_RETENTION_SECONDS: float = 86400
    SUBMIT_LOCK_TIMEOUT_MS: int = 2000
    MAX_PAYLOAD_BYTES: int = 1048576
    NOTIFY_CHANNEL: str = "runqueue"
    #: The DATABASES alias the LISTEN connections (workers' and the event
    #: stream's) open: a direct connection to the server when "default"
    #: goes through a transaction pooler, which cannot carry a LISTEN. None:
    #: the default database.
    LISTEN_DATABASE: str | None = None
    #: The hot statements (claim, fences, finishes) prepared on the server,
    #: whatever Django does with its own queries. None: prepared, unless
    #: POOLER is "transaction" and the pooler cannot carry prepared statements
    #: from one client to the next (PgBouncer before 1.21, or with
    #: max_prepared_statements = 0); True there is refused (runqueue.E005).
    PREPARED_STATEMENTS: bool | None = None
    #: What the default database's connections go through: None (straight to
    #: the server), "session" or "transaction" (a pooler in that mode, such as
    #: PgBouncer). Said, not guessed: the checks and the listener act on it.
    POOLER: str | None = None
    #: The transaction pooler tracks protocol-level prepared statements
    #: (PgBouncer 1.21+ with max_prepared_statements > 0).
    POOLER_TRACKS_PREPARED: bool = False
    #: A statement that only claims commits with the server's
    #: synchronous_commit (True) or without waiting for the disk or a
    #: synchronous standby (False, the default: the lease token fences a
    #: claim a crash lost; docs/decisions.md).
    DURABLE_CLAIMS: bool = False
    HANDLER_MODULES: tuple[str, ...] = ()
    TRANSIENT_EXCEPTIONS: tuple[str, ...] = ()
    TERMINAL_RUN_RETENTION_SECONDS: float | None = None
    #: The project's default ``start_within`` and ``max_duration`` (None: no
    #: limit); docs/decisions.md, "Run deadlines".
    START_WITHIN_SECONDS: float | None = None
    MAX_DURATION_SECONDS: float | None = None
    #: What a submit to a session whose run is busy does when it does not
    #: say (``on_busy``), and how many pending turns a session may hold
    #: (None: no limit); docs/decisions.md, "Busy sessions: on_busy".
    SESSION_ON_BUSY: str = "reject"
    SESSION_MAX_PENDING: int | None = 10
    API_MAX_BODY_BYTES: int = 262144
    API_SESSION_TENANT: str = "default"
    API_EVENTS_PAGE_SIZE: int = 100
    SCHEDULES: tuple[ScheduleSpec, ...] = ()
    STREAM_MAX_PER_PROCESS: int = 4
    STREAM_MAX_PER_TOKEN: int | None = 2
    STREAM_MAX_PER_TENANT: int | None = None
    STREAM_KEEPALIVE_SECONDS: float = 15
    STREAM_POLL_SECONDS: float = 5
    STREAM_MAX_SECONDS: float = 3600
    EMIT_MAX_BYTES: int = 16384
    #: A signal's data, as JSON, at most this many bytes; a run's mailbox
    #: keeps at most SIGNALS_KEPT_MAX signals (runqueue.leases.waits).
    SIGNAL_MAX_BYTES: int = 65536
    SIGNALS_KEPT_MAX: int = 100
    #: ``ctx.stream``'s text is live at once (NOTIFY) and durable in
    #: ``run.text`` events, one per this many ms or bytes (runqueue.stream.text).
    STREAM_TEXT_FLUSH_MS: int = 1000
    STREAM_TEXT_FLUSH_BYTES: int = 8192
    METRICS_TOKEN: str | None = None
    API_KINDS: tuple[str, ...] = ()
    #: A class index (``PriorityClass.index``), from the class's slug.
    API_SESSION_MAX_PRIORITY_CLASS: int = 1
    #: The default cap per class (a class missing or None: no cap), from a
    #: dict by class slug.
    CONCURRENCY: Mapping[PriorityClass, int | None] = field(
        default_factory=lambda: MappingProxyType({})
    )

    #: Budgets declared in settings, by key: each key's Budget row is made
    #: from its entry on first use (docs/decisions.md, "Budgets").
    BUDGETS: Mapping[str, BudgetSpec] = field(default_factory=lambda: MappingProxyType({}))
    #: Model prices per million tokens, by model name: what
    #: ``ctx.record_usage`` charges a call recorded without a cost
    #: (docs/decisions.md, "Usage and cost").
    PRICES: Mapping[str, Price] = field(default_factory=lambda: MappingProxyType({}))
    #: OpenTelemetry GenAI attributes (gen_ai.usage.input_tokens, ...) on
    #: the run's span for the usage its handler records (opt-in).
    TRACE_GENAI: bool = False

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


#: What RUNQUEUE["POOLER"] may say.
POOLERS = (None, "session", "transaction")
#: What a submit to a busy session may do (``on_busy``; docs/decisions.md,
#: "Busy sessions: on_busy"): refuse (ActiveRunConflict), wait in line
#: behind the active run, cancel it and start now with what it did
#: (interrupt) or without (rollback), or join a turn not started yet.
ON_BUSY = ("reject", "enqueue", "interrupt", "rollback", "merge")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetSpec:
    """A budget declared in ``RUNQUEUE["BUDGETS"]``: its Budget row's limits."""

    requests: int | None = None
    tokens: int | None = None
    per_seconds: int = 60
    shares: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


_BUDGET_FIELDS = ("requests", "tokens", "per_seconds", "shares")


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price per million tokens, each way (``RUNQUEUE["PRICES"]``)."""

    input: Decimal
    output: Decimal


#: The highest price per million tokens a setting may say.
MAX_PRICE = 10**9


def _prices(value: object) -> Mapping[str, Price]:
    """``{"gpt-5": {"input": 1.25, "output": 10}}`` (per million tokens) -> Prices."""
    from runqueue.limits import USAGE_MODEL_MAX_LENGTH

    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            "RUNQUEUE['PRICES'] must be a dict from model name to "
            f'{{"input": ..., "output": ...}} per million tokens, got {value!r}'
        )
    prices = {}
    for model, entry in value.items():
        if not isinstance(model, str) or not model or len(model) > USAGE_MODEL_MAX_LENGTH:
            raise ImproperlyConfigured(
                f"RUNQUEUE['PRICES'] keys must be 1-{USAGE_MODEL_MAX_LENGTH} character model "
                f"names, got {model!r}"
            )
        where = f"RUNQUEUE['PRICES'][{model!r}]"
        if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
            raise ImproperlyConfigured(
                f'{where} must be {{"input": ..., "output": ...}} (prices per million '
                f"tokens), got {entry!r}"
            )
        amounts = []
        for direction in ("input", "output"):
            number = entry[direction]
            if (
                isinstance(number, bool)
                or not isinstance(number, int | float | Decimal)
                or not 0 <= number <= MAX_PRICE
            ):
                raise ImproperlyConfigured(
                    f"{where}[{direction!r}] must be a number from 0 to {MAX_PRICE:,} "
                    f"(per million tokens), got {number!r}"
                )
            amounts.append(Decimal(str(number)))
        prices[model] = Price(*amounts)
    return MappingProxyType(prices)


def _budgets(value: object) -> Mapping[str, BudgetSpec]:
    """``{"openai:gpt-5": {"tokens": 30000, "requests": 500}}`` -> BudgetSpecs."""
    from runqueue.limits import BUDGET_KEY_MAX_LENGTH
    from runqueue.models import shares_problem

    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            f"RUNQUEUE['BUDGETS'] must be a dict from budget key to its limits, got {value!r}"
        )
    specs = {}
    for key, limits in value.items():
        where = f"RUNQUEUE['BUDGETS'][{key!r}]"
        if not isinstance(key, str) or not key or len(key) > BUDGET_KEY_MAX_LENGTH:
            raise ImproperlyConfigured(
                f"RUNQUEUE['BUDGETS'] keys must be 1-{BUDGET_KEY_MAX_LENGTH} character "
                f"strings, got {key!r}"
            )
        if not isinstance(limits, dict) or set(limits) - set(_BUDGET_FIELDS):
            raise ImproperlyConfigured(
                f"{where} must be a dict of {', '.join(_BUDGET_FIELDS)}, got {limits!r}"
            )
        for name in ("requests", "tokens", "per_seconds"):
            number = limits.get(name)
            if number is None and name != "per_seconds":
                continue
            if name == "per_seconds" and name not in limits:
                continue
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise ImproperlyConfigured(
                    f"{where}[{name!r}] must be an integer >= 1, got {number!r}"
                )
        if limits.get("requests") is None and limits.get("tokens") is None:
            raise ImproperlyConfigured(f"{where} must limit requests, tokens or both")
        shares = limits.get("shares", {})
        if (problem := shares_problem(shares)) is not None:
            raise ImproperlyConfigured(f"{where}['shares'] {problem}")
        specs[key] = BudgetSpec(
            requests=limits.get("requests"),
            tokens=limits.get("tokens"),
            per_seconds=limits.get("per_seconds", 60),
            shares=MappingProxyType(dict(shares)),
        )
    return MappingProxyType(specs)


#: The largest page the events endpoint serves, whatever a client asks for.
MAX_EVENTS_PAGE_SIZE = 1000
#: Bounds of STREAM_TEXT_FLUSH_BYTES: smaller makes a row per few tokens,
#: larger makes one event's text more than a reader should take at once.
MIN_TEXT_FLUSH_BYTES = 256
MAX_TEXT_FLUSH_BYTES = 1048576
#: STREAM_TEXT_FLUSH_MS at most a minute.
MAX_TEXT_FLUSH_MS = 60000

_INTEGERS = {
    "MAX_ATTEMPTS",
    "SUBMIT_LOCK_TIMEOUT_MS",
    "MAX_PAYLOAD_BYTES",
    "API_MAX_BODY_BYTES",
    "API_EVENTS_PAGE_SIZE",
    "STREAM_MAX_PER_PROCESS",
    "STREAM_MAX_PER_TOKEN",
    "STREAM_MAX_PER_TENANT",
    "EMIT_MAX_BYTES",
    "SIGNAL_MAX_BYTES",
    "SIGNALS_KEPT_MAX",
    "STREAM_TEXT_FLUSH_MS",
    "STREAM_TEXT_FLUSH_BYTES",
    "SESSION_MAX_PENDING",
}
#: Numbers that None turns off.
_MAY_BE_NONE = {
    "TERMINAL_RUN_RETENTION_SECONDS",
    "STREAM_MAX_PER_TOKEN",
    "STREAM_MAX_PER_TENANT",
    "START_WITHIN_SECONDS",
    "MAX_DURATION_SECONDS",
    "SESSION_MAX_PENDING",
}
# Everything else numeric may be zero (no backoff, no grace period).
_POSITIVE = _INTEGERS | {
    "LEASE_SECONDS",
    "HEARTBEAT_SECONDS",
    "SWEEP_SECONDS",
    "POLL_SECONDS",
    "IDEMPOTENCY_KEY_RETENTION_SECONDS",
    "TERMINAL_RUN_RETENTION_SECONDS",
    "STREAM_KEEPALIVE_SECONDS",
    "STREAM_POLL_SECONDS",
    "STREAM_MAX_SECONDS",
    "START_WITHIN_SECONDS",
    "MAX_DURATION_SECONDS",
}


#: Settings whose values a module above this one parses (it knows what they
#: hold): ``RUNQUEUE["SCHEDULES"]`` becomes ``runqueue.schedules.spec``'s
#: specs. That module registers its parser when imported, and the app's
#: ready() imports it: this module imports nothing of runqueue's but the
#: bottom layer (models, limits).
_REGISTERED = frozenset({"SCHEDULES"})
_PARSERS: dict[str, Callable[[object, Settings], Any]] = {}


def register_parser(name: str, parser: Callable[[object, Settings], Any]) -> None:
    """Parse ``RUNQUEUE[name]`` with ``parser`` from now on: it gets the
    value and every other setting, parsed, and raises ImproperlyConfigured
    for a bad value."""
    if name not in _REGISTERED:
        raise ValueError(f"RUNQUEUE[{name!r}] takes no registered parser")
    _PARSERS[name] = parser
    get_settings.cache_clear()


def _number(name: str, value: object, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be an integer, got {value!r}")
    return value


def _strings(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be a list of strings, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must hold non-empty strings, got {value!r}"
        )
    return tuple(value)


# Class names are PriorityClass slugs. runqueue.models is imported inside the
# functions: settings are parsed only once the apps are ready.


def _class_name(name: str, value: object) -> int:
    """A class's slug -> its index."""
    from runqueue.models import PriorityClass

    slugs = PriorityClass.slugs()
    if value not in slugs:
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must be one of {', '.join(slugs)}, got {value!r}"
        )
    return PriorityClass.from_slug(value).index


def _concurrency(value: object) -> Mapping[PriorityClass, int | None]:
    """``{"interactive": 2, "async": None}`` -> the cap of every class."""
    from runqueue.models import PriorityClass

    slugs = PriorityClass.slugs()
    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            "RUNQUEUE['CONCURRENCY'] must be a dict from class name "
            f"({', '.join(slugs)}) to a cap or None, got {value!r}"
        )
    unknown = sorted(map(repr, set(value) - set(slugs)))
    if unknown:
        raise ImproperlyConfigured(
            f"RUNQUEUE['CONCURRENCY'] has unknown class(es) {', '.join(unknown)}; "
            f"the classes are {', '.join(slugs)}"
        )
    caps: dict[PriorityClass, int | None] = {}
    for member in PriorityClass:
        cap = value.get(member.slug)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise ImproperlyConfigured(
                f"RUNQUEUE['CONCURRENCY'][{member.slug!r}] must be None (no cap) or an integer "
                f">= 0 (0 pauses every key without an override), got {cap!r}"
            )
        caps[member] = cap
    return MappingProxyType(caps)


def parse(raw: object) -> Settings:
    """Validate a RUNQUEUE dict; raise ImproperlyConfigured naming the bad key."""
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"RUNQUEUE must be a dict, got {type(raw).__name__}")
    known = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ImproperlyConfigured(
            f"Unknown RUNQUEUE setting(s): {', '.join(map(repr, unknown))}. "
            f"Known: {', '.join(sorted(known))}"
        )
    # Each value checked for its own field above; Settings(**values) takes them.
    values: dict[str, Any] = {}
    deferred: dict[str, object] = {}
    for name, value in raw.items():
        if name in ("HANDLER_MODULES", "TRANSIENT_EXCEPTIONS"):
            values[name] = _strings(name, value)
        elif name == "API_KINDS":
            values[name] = _api_kinds(value)
        elif name == "API_SESSION_MAX_PRIORITY_CLASS":
            values[name] = _class_name(name, value)
        elif name == "CONCURRENCY":
            values[name] = _concurrency(value)
        elif name == "BUDGETS":
            values[name] = _budgets(value)
        elif name == "PRICES":
            values[name] = _prices(value)
        elif name == "NOTIFY_CHANNEL":
            if not isinstance(value, str) or not value or len(value) > 63:
                raise ImproperlyConfigured(
                    f"RUNQUEUE['NOTIFY_CHANNEL'] must be a 1-63 character string, got {value!r}"
                )
            values[name] = value
        elif name == "PREPARED_STATEMENTS":
            if value is not None and not isinstance(value, bool):
                raise ImproperlyConfigured(
                    f"RUNQUEUE['PREPARED_STATEMENTS'] must be None, True or False, got {value!r}"
                )
            values[name] = value
        elif name in ("POOLER_TRACKS_PREPARED", "DURABLE_CLAIMS", "TRACE_GENAI"):
            if not isinstance(value, bool):
                raise ImproperlyConfigured(
                    f"RUNQUEUE[{name!r}] must be True or False, got {value!r}"
                )
            values[name] = value
        elif name == "SESSION_ON_BUSY":
            if value not in ON_BUSY:
                raise ImproperlyConfigured(
                    f"RUNQUEUE['SESSION_ON_BUSY'] must be one of {', '.join(ON_BUSY)}, "
                    f"got {value!r}"
                )
            values[name] = value
        elif name == "POOLER":
            if value not in POOLERS:
                raise ImproperlyConfigured(
                    "RUNQUEUE['POOLER'] must be None, 'session' or 'transaction' (what the "
                    f"default database's connections go through), got {value!r}"
                )
            values[name] = value
        elif name == "LISTEN_DATABASE":
            if value is not None and (not isinstance(value, str) or not value):
                raise ImproperlyConfigured(
                    f"RUNQUEUE['LISTEN_DATABASE'] must be None or a DATABASES alias, got {value!r}"
                )
            values[name] = value
        elif name == "API_SESSION_TENANT":
            if not isinstance(value, str) or not value or len(value) > TENANT_MAX_LENGTH:
                raise ImproperlyConfigured(
                    f"RUNQUEUE['API_SESSION_TENANT'] must be a 1-{TENANT_MAX_LENGTH} character "
                    "string, "
                    f"got {value!r}"
                )
            values[name] = value
        elif name in _REGISTERED:
            deferred[name] = value  # parsed last, under the other settings
        elif name == "METRICS_TOKEN":
            if value is not None and (not isinstance(value, str) or len(value) < 16):
                raise ImproperlyConfigured(
                    "RUNQUEUE['METRICS_TOKEN'] must be None or a string of 16 or more characters"
                )
            values[name] = value
        elif name in _MAY_BE_NONE and value is None:
            values[name] = None
        else:
            number = _number(name, value, integer=name in _INTEGERS)
            if number < 0 or (number == 0 and name in _POSITIVE) or number != number:
                raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] is out of range: {value!r}")
            if name.endswith("_SECONDS") and number > MAX_WAIT_SECONDS:
                # Added to the database's clock: past this a lease, a backoff
                # or a retention would fail in the statement that uses it.
                raise ImproperlyConfigured(
                    f"RUNQUEUE[{name!r}] must be at most {MAX_WAIT_SECONDS:.0f} seconds "
                    f"(100 years), got {value!r}"
                )
            values[name] = number
    settings = Settings(**values)
    if not 0 <= settings.BACKOFF_JITTER < 1:
        raise ImproperlyConfigured("RUNQUEUE['BACKOFF_JITTER'] must be in [0, 1)")
    if settings.HEARTBEAT_SECONDS >= settings.LEASE_SECONDS:
        raise ImproperlyConfigured(
            "RUNQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS, "
            "or every lease expires between heartbeats"
        )
    if not MIN_TEXT_FLUSH_BYTES <= settings.STREAM_TEXT_FLUSH_BYTES <= MAX_TEXT_FLUSH_BYTES:
        raise ImproperlyConfigured(
            f"RUNQUEUE['STREAM_TEXT_FLUSH_BYTES'] must be {MIN_TEXT_FLUSH_BYTES}-"
            f"{MAX_TEXT_FLUSH_BYTES} (one run.text event's text), "
            f"got {settings.STREAM_TEXT_FLUSH_BYTES!r}"
        )
    if settings.STREAM_TEXT_FLUSH_MS > MAX_TEXT_FLUSH_MS:
        raise ImproperlyConfigured(
            f"RUNQUEUE['STREAM_TEXT_FLUSH_MS'] must be at most {MAX_TEXT_FLUSH_MS} "
            "(a reconnecting client waits this long at most for text it missed), "
            f"got {settings.STREAM_TEXT_FLUSH_MS!r}"
        )
    if settings.API_EVENTS_PAGE_SIZE > MAX_EVENTS_PAGE_SIZE:
        raise ImproperlyConfigured(
            f"RUNQUEUE['API_EVENTS_PAGE_SIZE'] must be at most {MAX_EVENTS_PAGE_SIZE}"
        )
    for name, value in deferred.items():
        if name not in _PARSERS:
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] was read before the runqueue app was ready "
                "(its parser is registered by the app's ready())"
            )
        settings = dataclasses.replace(settings, **{name: _PARSERS[name](value, settings)})
    return settings


#: Kinds the HTTP API never submits: runqueue's own jobs and django.tasks runs,
#: whose payload names code to import; those are submitted from Python only.
RESERVED_KIND_PREFIXES = ("runqueue.", "django.tasks")


def _api_kinds(value: object) -> tuple[str, ...]:
    kinds = _strings("API_KINDS", value)
    reserved = [k for k in kinds if k.startswith(RESERVED_KIND_PREFIXES)]
    if reserved:
        raise ImproperlyConfigured(
            f"RUNQUEUE['API_KINDS'] lists reserved kind(s) {', '.join(map(repr, reserved))}: "
            "kinds starting with 'runqueue.' or 'django.tasks' are submitted from Python only"
        )
    return kinds


@cache
def get_settings() -> Settings:
    """The current RUNQUEUE settings (cached; reset when settings change)."""
    from django.conf import settings

    return parse(getattr(settings, "RUNQUEUE", {}))


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "RUNQUEUE":
        get_settings.cache_clear()
