"""What a RUNQUEUE value may be: each ``Kind`` names it for the reference
and parses it for the settings object, raising ImproperlyConfigured that
names the key. The table (``runqueue.conf.table``) gives each key one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from runqueue.limits import (
    BUDGET_KEY_MAX_LENGTH,
    MAX_WAIT_SECONDS,
    MIN_DEADLINE_SECONDS,
    TENANT_MAX_LENGTH,
    USAGE_MODEL_MAX_LENGTH,
)

if TYPE_CHECKING:
    from runqueue.models import PriorityClass


@dataclass(frozen=True, slots=True)
class Kind:
    """A setting's value: ``type`` as a project writes it (the reference
    shows it), ``parse`` from that to what the settings object holds. No
    ``parse``: a module above parses it (``runqueue.conf.register_parser``)."""

    type: str
    parse: Callable[[str, object], object] | None


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
#: What RUNQUEUE["POOLER"] may say.
POOLERS = (None, "session", "transaction")
#: What a submit to a busy session may do (``on_busy``; docs/decisions/sessions.md,
#: "Busy sessions: on_busy"): refuse (ActiveRunConflict), wait in line
#: behind the active run, cancel it and start now with what it did
#: (interrupt) or without (rollback), or join a turn not started yet.
ON_BUSY = (
    "reject",
    "enqueue",
    "interrupt",
    "rollback",
    "merge",
    "steer",
    "answer",
    "debounce",
    "latest",
)
#: Kinds the HTTP API never submits: runqueue's own jobs and django.tasks runs,
#: whose payload names code to import; those are submitted from Python only.
RESERVED_KIND_PREFIXES = ("runqueue.", "django.tasks")


def _number_of(name: str, value: object, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be an integer, got {value!r}")
    return value


def deadline_bound(name: str, number: float) -> None:
    """A run deadline's setting is at least a microsecond: shorter, it is
    stored as zero and every run would expire or fail at once."""
    if number < MIN_DEADLINE_SECONDS:
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must be at least {MIN_DEADLINE_SECONDS:.6f} seconds (a "
            f"microsecond, the resolution deadlines are stored at), got {number!r}"
        )


def number(
    *,
    integer: bool = False,
    positive: bool = False,
    none: bool = False,
    bound: Callable[[str, float], None] | None = None,
) -> Kind:
    """A number >= 0 (> 0 with ``positive``; None allowed with ``none``,
    which turns it off). A ``*_SECONDS`` key is added to the database's
    clock: past ``MAX_WAIT_SECONDS`` the statement that uses it would fail.
    ``bound`` checks a key's own range."""

    def parse(name: str, value: object) -> float | None:
        if none and value is None:
            return None
        number = _number_of(name, value, integer=integer)
        if number < 0 or (number == 0 and positive) or number != number:
            raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] is out of range: {value!r}")
        if name.endswith("_SECONDS") and number > MAX_WAIT_SECONDS:
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] must be at most {MAX_WAIT_SECONDS:.0f} seconds "
                f"(100 years), got {value!r}"
            )
        if bound is not None:
            bound(name, number)
        return number

    what = "integer" if integer else "number"
    type_ = f"{what} {'> 0' if positive else '>= 0'}"
    return Kind(f"{type_} or None" if none else type_, parse)


#: The numbers most keys take (``number`` gives the others, with a bound).
NUMBER = number()
POSITIVE = number(positive=True)
COUNT = number(integer=True, positive=True)
MAYBE_COUNT = number(integer=True, positive=True, none=True)


def at_most(limit: float, why: str = "") -> Callable[[str, float], None]:
    """A bound: the value at most ``limit`` (``why`` said in the error)."""

    def bound(name: str, value: float) -> None:
        if value > limit:
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] must be at most {limit}{why}, got {value!r}"
                if why
                else f"RUNQUEUE[{name!r}] must be at most {limit}"
            )

    return bound


def below_one(name: str, value: float) -> None:
    """A fraction: in [0, 1)."""
    if not value < 1:
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be in [0, 1)")


def between(low: int, high: int, why: str) -> Callable[[str, float], None]:
    """A bound: the value from ``low`` to ``high`` (``why`` said in the error)."""

    def bound(name: str, value: float) -> None:
        if not low <= value <= high:
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] must be {low}-{high} ({why}), got {value!r}"
            )

    return bound


def _strings(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be a list of strings, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must hold non-empty strings, got {value!r}"
        )
    return tuple(value)


STRINGS = Kind("list of strings", _strings)


def _api_kinds(name: str, value: object) -> tuple[str, ...]:
    kinds = _strings(name, value)
    reserved = [k for k in kinds if k.startswith(RESERVED_KIND_PREFIXES)]
    if reserved:
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] lists reserved kind(s) {', '.join(map(repr, reserved))}: "
            "kinds starting with 'runqueue.' or 'django.tasks' are submitted from Python only"
        )
    return kinds


API_KINDS = Kind("list of kinds", _api_kinds)


def _names_to(what: str, *, callables: bool) -> Callable[[str, object], Mapping[str, object]]:
    """A dict of event names (1-255 characters) to strings (a dotted path,
    a body member) or, with ``callables``, a callable."""

    def parse(name: str, value: object) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] must be a dict of event names to {what}, got {value!r}"
            )
        for key, item in value.items():
            if not isinstance(key, str) or not key or len(key) > EVENT_NAME_MAX_LENGTH:
                raise ImproperlyConfigured(
                    f"RUNQUEUE[{name!r}] has {key!r}, which is no event name "
                    f"(1-{EVENT_NAME_MAX_LENGTH} characters)"
                )
            if not ((isinstance(item, str) and item) or (callables and callable(item))):
                raise ImproperlyConfigured(
                    f"RUNQUEUE[{name!r}][{key!r}] must be {what}, got {item!r}"
                )
        return MappingProxyType(dict(value))

    return parse


#: The longest event name (the column's length; models.inbound says so too).
EVENT_NAME_MAX_LENGTH = 255

EVENT_VERIFIERS = Kind(
    "dict: event name -> dotted path or callable",
    _names_to("a dotted path or a callable", callables=True),
)
EVENT_KEY_FIELDS = Kind(
    "dict: event name -> body member", _names_to("a body member's name", callables=False)
)


def _event_names(name: str, value: object) -> tuple[str, ...]:
    names = _strings(name, value)
    if long := [n for n in names if len(n) > EVENT_NAME_MAX_LENGTH]:
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] holds names longer than {EVENT_NAME_MAX_LENGTH} "
            f"characters: {long[0][:40]!r}..."
        )
    return names


EVENT_NAMES = Kind("list of event names", _event_names)


def _accepted(type_: str, accepts: Callable[[object], bool], must_be: str) -> Kind:
    """A setting whose value is kept as it is once ``accepts`` says yes;
    otherwise the error says it must be ``must_be`` and shows the value."""

    def parse(name: str, value: object) -> object:
        if not accepts(value):
            raise ImproperlyConfigured(f"RUNQUEUE[{name!r}] must be {must_be}, got {value!r}")
        return value

    return Kind(type_, parse)


BOOLEAN = _accepted("bool", lambda value: isinstance(value, bool), "True or False")
MAYBE_BOOLEAN = _accepted(
    "None, True or False",
    lambda value: value is None or isinstance(value, bool),
    "None, True or False",
)


def text(longest: int) -> Kind:
    """A non-empty string of at most ``longest`` characters."""

    def parse(name: str, value: object) -> str:
        if not isinstance(value, str) or not value or len(value) > longest:
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] must be a 1-{longest} character string, got {value!r}"
            )
        return value

    return Kind(f"string, 1-{longest} characters", parse)


NOTIFY_CHANNEL = text(63)
TENANT = text(TENANT_MAX_LENGTH)


DATABASE_ALIAS = _accepted(
    "a DATABASES alias or None",
    lambda value: value is None or (isinstance(value, str) and bool(value)),
    "None or a DATABASES alias",
)


def _secret(name: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or len(value) < 16):
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must be None or a string of 16 or more characters"
        )
    return value


SECRET = Kind("string of 16+ characters, or None", _secret)


POOLER = _accepted(
    'None, "session" or "transaction"',
    lambda value: value in POOLERS,
    "None, 'session' or 'transaction' (what the default database's connections go through)",
)


def _on_busy(name: str, value: object) -> str:
    if value not in ON_BUSY:
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must be one of {', '.join(ON_BUSY)}, got {value!r}"
        )
    return str(value)


SESSION_ON_BUSY = Kind(" | ".join(f'"{what}"' for what in ON_BUSY), _on_busy)


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


CLASS_NAME = Kind("class name", _class_name)


def _concurrency(name: str, value: object) -> Mapping[PriorityClass, int | None]:
    """``{"interactive": 2, "async": None}`` -> the cap of every class."""
    from runqueue.models import PriorityClass

    slugs = PriorityClass.slugs()
    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] must be a dict from class name "
            f"({', '.join(slugs)}) to a cap or None, got {value!r}"
        )
    unknown = sorted(map(repr, set(value) - set(slugs)))
    if unknown:
        raise ImproperlyConfigured(
            f"RUNQUEUE[{name!r}] has unknown class(es) {', '.join(unknown)}; "
            f"the classes are {', '.join(slugs)}"
        )
    caps: dict[PriorityClass, int | None] = {}
    for member in PriorityClass:
        cap = value.get(member.slug)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}][{member.slug!r}] must be None (no cap) or an integer "
                f">= 0 (0 pauses every key without an override), got {cap!r}"
            )
        caps[member] = cap
    return MappingProxyType(caps)


CONCURRENCY = Kind("dict: class name -> integer >= 0 or None", _concurrency)


def _price(where: str, entry: object) -> Price:
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
    return Price(*amounts)


def _keyed[V](
    of: str, keys: str, max_length: int, entry: Callable[[str, object], V]
) -> Callable[[str, object], Mapping[str, V]]:
    """The parser of a setting that is a dict by key (``PRICES``, ``BUDGETS``):
    each key a 1-``max_length`` character string, each value parsed by
    ``entry``; ``of`` and ``keys`` name them in the errors."""

    def parse(name: str, value: object) -> Mapping[str, V]:
        if not isinstance(value, dict):
            raise ImproperlyConfigured(
                f"RUNQUEUE[{name!r}] must be a dict from {of}, got {value!r}"
            )
        parsed = {}
        for key, item in value.items():
            if not isinstance(key, str) or not key or len(key) > max_length:
                raise ImproperlyConfigured(
                    f"RUNQUEUE[{name!r}] keys must be 1-{max_length} character {keys}, got {key!r}"
                )
            parsed[key] = entry(f"RUNQUEUE[{name!r}][{key!r}]", item)
        return MappingProxyType(parsed)

    return parse


#: ``{"gpt-5": {"input": 1.25, "output": 10}}`` (per million tokens) -> Prices.
PRICES = Kind(
    'dict: model -> {"input": number, "output": number}',
    _keyed(
        'model name to {"input": ..., "output": ...} per million tokens',
        "model names",
        USAGE_MODEL_MAX_LENGTH,
        _price,
    ),
)


def _budget(where: str, limits: object) -> BudgetSpec:
    from runqueue.models import shares_problem

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
    return BudgetSpec(
        requests=limits.get("requests"),
        tokens=limits.get("tokens"),
        per_seconds=limits.get("per_seconds", 60),
        shares=MappingProxyType(dict(shares)),
    )


#: ``{"openai:gpt-5": {"tokens": 30000, "requests": 500}}`` -> BudgetSpecs.
BUDGETS = Kind(
    "dict: key -> {requests, tokens, per_seconds, shares}",
    _keyed("budget key to its limits", "strings", BUDGET_KEY_MAX_LENGTH, _budget),
)
#: ``RUNQUEUE["SCHEDULES"]``, parsed by ``runqueue.schedules.spec``.
SCHEDULES = Kind("dict: name -> schedule", None)
