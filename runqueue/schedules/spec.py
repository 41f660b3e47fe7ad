"""``RUNQUEUE["SCHEDULES"]``: validated into frozen specs at settings time.

::

    RUNQUEUE = {"SCHEDULES": {
        "nightly-digest": {
            "cron": "0 3 * * *",            # required: five cron fields
            "kind": "digest.send",          # required: a handler kind
            "payload": {"scope": "all"},    # JSON, default {}
            "priority": "maintenance",      # class name or 0-32767, default maintenance
            "timezone": "Europe/Paris",     # IANA name, default UTC
            "tenant": "acme",               # default "default"
            "catch_up": "latest",           # latest | all | none
            "catch_up_limit": 10,           # with "all": at most this many missed ticks
            "overlap": "skip",              # skip | allow | cancel_previous
            "max_attempts": 3,              # default RUNQUEUE["MAX_ATTEMPTS"]
        },
    }}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from runqueue.conf import Settings, get_settings, register_parser
from runqueue.models import PRIORITY_MAX, CatchUp, Overlap, PriorityClass, Schedule
from runqueue.schedules import cron
from runqueue.submission.rules import check_submission
from runqueue.types import JSON

#: The names of API and handler schedules start with it (``requests.NAME_PREFIX``).
RESERVED_PREFIX = "api:"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")
MAX_CATCH_UP_LIMIT = 1000
#: The keys a settings schedule takes: each is the Schedule field it defines.
_KEYS = (
    "cron",
    "kind",
    "payload",
    "priority",
    "timezone",
    "tenant",
    "catch_up",
    "catch_up_limit",
    "overlap",
    "max_attempts",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """One schedule's definition, whether from settings or the admin."""

    name: str
    cron: str
    kind: str
    payload_json: str = "{}"
    priority: int = PriorityClass.MAINTENANCE
    timezone: str = "UTC"
    tenant: str = "default"
    catch_up: str = CatchUp.LATEST
    catch_up_limit: int = 10
    overlap: str = Overlap.SKIP
    max_attempts: int | None = None

    @property
    def payload(self) -> JSON:
        return json.loads(self.payload_json)

    def fields(self) -> dict[str, object]:
        """The Schedule model's definition fields: one per settings key."""
        return {key: getattr(self, key) for key in _KEYS}


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(
            f"schedule name {name!r} must be 1-100 letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit"
        )
    if name.startswith(RESERVED_PREFIX):
        raise ValueError(
            f"schedule name {name!r} starts with {RESERVED_PREFIX!r}, which names the schedules "
            "made over the API and by handlers"
        )
    return name


def check_priority(value: object) -> int:
    """A class's slug (any case) or a priority value -> the priority."""
    allowed = f"{', '.join(PriorityClass.slugs())} or 0-{PRIORITY_MAX}"
    if isinstance(value, str):
        try:
            return int(PriorityClass.from_slug(value.lower()))
        except ValueError:
            raise ValueError(f"priority {value!r} must be {allowed}") from None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PRIORITY_MAX:
        raise ValueError(f"priority must be {allowed}")
    return value


def check_catch_up(policy: object, limit: object) -> tuple[str, int]:
    if policy not in CatchUp.values:
        raise ValueError(f"catch_up {policy!r} must be one of {', '.join(CatchUp.values)}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"catch_up_limit must be an integer, got {limit!r}")
    if not 1 <= limit <= MAX_CATCH_UP_LIMIT:
        raise ValueError(f"catch_up_limit must be between 1 and {MAX_CATCH_UP_LIMIT}")
    return policy, limit


def check_overlap(policy: object) -> str:
    if policy not in Overlap.values:
        raise ValueError(f"overlap {policy!r} must be one of {', '.join(Overlap.values)}")
    return str(policy)


def check_runs(
    *,
    name: str,
    kind: object,
    payload: object,
    tenant: object,
    priority: object,
    max_attempts: object,
    conf: Settings | None = None,
    registered_only: bool = False,
) -> None:
    """ValueError with the first problem ``submit`` would find in this
    schedule's runs (the rules are ``check_submission``'s, not restated
    here), so a schedule submit refuses is refused where it is defined, not
    at every tick. A kind without a handler is a problem only with
    ``registered_only`` (settings are read before every handler module may
    be imported: check W020 reports it)."""
    _, problems = check_submission(
        kind=kind,
        payload=payload,
        tenant=tenant,
        principal=Schedule(name=name).principal,
        priority=priority,
        max_attempts=max_attempts,
        registered_only=registered_only,
        conf=conf,
    )
    if problems:
        raise ValueError(f"{problems[0].field} {problems[0].detail}")


def build(name: object, raw: object, conf: Settings | None = None) -> ScheduleSpec:
    """One schedule from its settings dict; ValueError saying what is wrong."""
    name = check_name(name)
    if not isinstance(raw, dict):
        raise ValueError(f"must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw).difference(_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}")
    for required in ("cron", "kind"):
        if required not in raw:
            raise ValueError(f"{required!r} is required")
    payload = raw.get("payload", {})
    try:
        payload_json = json.dumps(payload, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"payload must be JSON-serialisable: {exc}") from exc
    max_attempts = raw.get("max_attempts")
    timezone = raw.get("timezone", "UTC")
    cron.zone(timezone)
    catch_up, limit = check_catch_up(raw.get("catch_up", "latest"), raw.get("catch_up_limit", 10))
    priority = check_priority(raw.get("priority", int(PriorityClass.MAINTENANCE)))
    tenant = raw.get("tenant", "default")
    check_runs(
        name=name,
        kind=raw["kind"],
        payload=payload,
        tenant=tenant,
        priority=priority,
        max_attempts=max_attempts,
        conf=conf,
    )
    return ScheduleSpec(
        name=name,
        cron=cron.validate(raw["cron"]),
        kind=raw["kind"],
        payload_json=payload_json,
        priority=priority,
        timezone=timezone,
        tenant=tenant,
        catch_up=catch_up,
        catch_up_limit=limit,
        overlap=check_overlap(raw.get("overlap", Overlap.SKIP)),
        max_attempts=max_attempts,
    )


def parse(raw: object, conf: Settings | None = None) -> tuple[ScheduleSpec, ...]:
    """RUNQUEUE["SCHEDULES"] -> specs; ImproperlyConfigured naming the schedule.
    ``conf``: the other settings (the payload's size limit, the default
    attempts), when the settings themselves are being parsed."""
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(
            f"RUNQUEUE['SCHEDULES'] must be a dict of name -> schedule, got {type(raw).__name__}"
        )
    specs = []
    for name, value in raw.items():
        try:
            specs.append(build(name, value, conf))
        except ValueError as exc:
            raise ImproperlyConfigured(f"RUNQUEUE['SCHEDULES'][{name!r}]: {exc}") from exc
    return tuple(specs)


def configured(conf: Settings | None = None) -> tuple[ScheduleSpec, ...]:
    """The schedules ``RUNQUEUE["SCHEDULES"]`` defines (``conf``: the
    current settings), typed: the settings layer holds them untyped."""
    specs: tuple[ScheduleSpec, ...] = (conf or get_settings()).SCHEDULES
    return specs


# RUNQUEUE["SCHEDULES"] is this module's to parse (runqueue.conf does not
# import it); imported by the app's ready().
register_parser("SCHEDULES", parse)
