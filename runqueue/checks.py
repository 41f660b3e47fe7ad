"""System checks: runqueue needs PostgreSQL and a well-formed RUNQUEUE dict.

The settings table (``runqueue.conf.table``) names, for each setting, the
checks below that look at it; tests/unit/test_settings_table.py holds the two
together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

if TYPE_CHECKING:
    from psycopg import IsolationLevel

    from runqueue.conf import Settings


def _parsed() -> Settings | ImproperlyConfigured:
    """The RUNQUEUE dict, parsed afresh, or why it is malformed."""
    from django.conf import settings

    from runqueue.conf import parse

    try:
        return parse(getattr(settings, "RUNQUEUE", {}))
    except ImproperlyConfigured as exc:
        return exc


type _Check = Callable[..., list[CheckMessage]]


def _of_settings(*tags: str) -> Callable[[Callable[[Settings], list[CheckMessage]]], _Check]:
    """Register a check of the parsed RUNQUEUE dict (under ``tags``): it
    is given the settings object, and is not run while the dict is
    malformed, which check_settings reports (runqueue.E002)."""

    def decorate(check: Callable[[Settings], list[CheckMessage]]) -> _Check:
        def run(
            app_configs: Sequence[AppConfig] | None = None, **kwargs: object
        ) -> list[CheckMessage]:
            conf = _parsed()
            return [] if isinstance(conf, ImproperlyConfigured) else check(conf)

        # Named as the check, but not wrapping it: Django asks the function
        # it registers (its signature) to take keyword arguments.
        run.__name__ = run.__qualname__ = check.__name__
        run.__doc__ = check.__doc__
        return register(*tags)(run)

    return decorate


@register(Tags.database, Tags.compatibility)
def check_database(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: object,
) -> list[Error]:
    """The claim needs FOR UPDATE SKIP LOCKED and LISTEN/NOTIFY: PostgreSQL only."""
    errors = []
    for alias in connections:
        vendor = connections[alias].vendor
        if alias == "default" and vendor != "postgresql":
            errors.append(
                Error(
                    f"runqueue needs PostgreSQL, but the {alias!r} database is {vendor}.",
                    hint="Point DATABASES['default'] at PostgreSQL 14 or newer "
                    "(django.db.backends.postgresql with psycopg 3).",
                    id="runqueue.E001",
                )
            )
    return errors


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[Error]:
    """Report a malformed RUNQUEUE dict as a check error, not a crash later."""
    if not isinstance(problem := _parsed(), ImproperlyConfigured):
        return []
    return [
        Error(
            str(problem),
            hint="docs/settings.md lists the settings, what each may hold and its default.",
            id="runqueue.E002",
        )
    ]


@_of_settings()
def check_schedules(conf: Settings) -> list[CheckMessage]:
    """A settings schedule naming a kind no handler is registered for would
    log an error at every tick instead of firing."""
    from runqueue import registry
    from runqueue.schedules.spec import configured

    return [
        CheckWarning(
            f"RUNQUEUE['SCHEDULES'][{spec.name!r}] submits kind {spec.kind!r}, "
            "which no handler is registered for.",
            hint="Register it with @runqueue.handler, or list its module in "
            "RUNQUEUE['HANDLER_MODULES'].",
            id="runqueue.W020",
        )
        for spec in configured(conf)
        if not registry.is_registered(spec.kind)
    ]


@_of_settings()
def check_concurrency_and_api_kinds(conf: Settings) -> list[CheckMessage]:
    """Caps need READ COMMITTED claims; API_KINDS should name handled kinds."""
    from runqueue import registry

    messages: list[CheckMessage] = []
    isolation = default_isolation_level()
    if conf.caps_configured and isolation not in (None, _read_committed()):
        messages.append(
            Error(
                "RUNQUEUE['CONCURRENCY'] sets caps, but the default database runs at "
                f"isolation level {isolation!r}: a capped claim counts running runs "
                "with a fresh snapshot, which only READ COMMITTED gives.",
                hint="Leave DATABASES['default']['OPTIONS']['isolation_level'] unset "
                "(READ COMMITTED) for the processes that run workers.",
                id="runqueue.E003",
            )
        )
    unknown = [kind for kind in conf.API_KINDS if not registry.is_registered(kind)]
    if unknown:
        messages.append(
            CheckWarning(
                f"RUNQUEUE['API_KINDS'] lists kind(s) with no handler: {', '.join(unknown)}.",
                hint="Register a handler with @runqueue.handler, or remove the kind; "
                "the API answers 422 validation-failed for it meanwhile.",
                id="runqueue.W003",
            )
        )
    return messages


@_of_settings()
def check_listen_database(conf: Settings) -> list[CheckMessage]:
    """RUNQUEUE["LISTEN_DATABASE"] must name a database Django knows: the
    listener would fail at every reconnect and fall back to polling."""
    alias = conf.LISTEN_DATABASE
    known = list(connections)  # DATABASES' aliases
    if alias is None or alias in known:
        return []
    return [
        Error(
            f"RUNQUEUE['LISTEN_DATABASE'] is {alias!r}, which is not a DATABASES alias.",
            hint="Name an entry of DATABASES that connects to the PostgreSQL server directly "
            f"(not through a transaction pooler); known: {', '.join(known)}.",
            id="runqueue.E004",
        )
    ]


@_of_settings()
def check_pooler(conf: Settings) -> list[CheckMessage]:
    """Behind a transaction pooler (RUNQUEUE["POOLER"]): no statement
    prepared on one client's server connection may run on another's, and a
    LISTEN needs a direct connection. A default database on PgBouncer's
    usual port with no POOLER said is asked about."""
    from django.conf import settings

    default = settings.DATABASES.get("default", {})
    threshold = (default.get("OPTIONS") or {}).get("prepare_threshold")
    messages: list[CheckMessage] = []
    if conf.POOLER == "transaction" and not conf.POOLER_TRACKS_PREPARED:
        if conf.PREPARED_STATEMENTS or threshold is not None:
            what = (
                "RUNQUEUE['PREPARED_STATEMENTS'] is True"
                if conf.PREPARED_STATEMENTS
                else f"DATABASES['default']['OPTIONS']['prepare_threshold'] is {threshold!r}"
            )
            messages.append(
                Error(
                    f"{what}, but the default database goes through a transaction pooler "
                    "that does not carry prepared statements (RUNQUEUE['POOLER'] is "
                    "'transaction'): a statement prepared by one client would run on another's "
                    'server connection ("bind message supplies 3 parameters, but prepared '
                    'statement requires 17").',
                    hint="Leave PREPARED_STATEMENTS unset (None) and remove prepare_threshold; "
                    "or, with PgBouncer 1.21+ and max_prepared_statements > 0, set "
                    "RUNQUEUE['POOLER_TRACKS_PREPARED'] = True.",
                    id="runqueue.E005",
                )
            )
        if conf.LISTEN_DATABASE is None:
            messages.append(
                CheckWarning(
                    "The default database goes through a transaction pooler "
                    "(RUNQUEUE['POOLER'] is 'transaction') and RUNQUEUE['LISTEN_DATABASE'] is "
                    "not set: a LISTEN through it hears nothing, so workers and event "
                    "streams fall back to their polls (POLL_SECONDS, STREAM_POLL_SECONDS).",
                    hint="Add a DATABASES entry that connects to the server directly and name "
                    "it in RUNQUEUE['LISTEN_DATABASE'].",
                    id="runqueue.W005",
                )
            )
    if conf.POOLER is None and str(default.get("PORT") or "") == "6432":
        messages.append(
            CheckWarning(
                "The default database is on port 6432, PgBouncer's usual port, and "
                "RUNQUEUE['POOLER'] is not set.",
                hint="Behind PgBouncer say its pool mode: RUNQUEUE['POOLER'] = 'transaction' "
                "(or 'session'). A server of its own on that port: silence this with "
                "SILENCED_SYSTEM_CHECKS = ['runqueue.W006'].",
                id="runqueue.W006",
            )
        )
    return messages


def default_isolation_level() -> object:
    """The isolation level the default database's OPTIONS ask for (None: the
    server's); whatever the settings hold, compared with READ COMMITTED."""
    from django.conf import settings

    return settings.DATABASES.get("default", {}).get("OPTIONS", {}).get("isolation_level")


def _read_committed() -> IsolationLevel:
    from psycopg import IsolationLevel

    return IsolationLevel.READ_COMMITTED


ROUTER = "runqueue.reads.routing.ReadReplicaRouter"


@_of_settings(Tags.database)
def check_read_database(conf: Settings) -> list[CheckMessage]:
    """RUNQUEUE["READ_DATABASE"] must name a database Django knows, and its
    router must be installed: without it the console's ORM reads would stay
    on the primary while its raw ones went to the replica."""
    from django.db import router

    from runqueue.reads.routing import ReadReplicaRouter

    alias = conf.READ_DATABASE
    if alias is None:
        return []
    known = list(connections)
    if alias not in known:
        return [
            Error(
                f"RUNQUEUE['READ_DATABASE'] is {alias!r}, which is not a DATABASES alias.",
                hint="Name the DATABASES entry of a streaming replica of the default "
                f"database; known: {', '.join(known)}.",
                id="runqueue.E016",
            )
        ]
    routers = router.routers
    ours = [i for i, r in enumerate(routers) if isinstance(r, ReadReplicaRouter)]
    if not ours:
        return [
            Error(
                f"RUNQUEUE['READ_DATABASE'] is {alias!r}, but {ROUTER} is not in "
                "DATABASE_ROUTERS.",
                hint=f'Add DATABASE_ROUTERS = ["{ROUTER}", ...]: it sends the console\'s, '
                "/metrics' and the API's reads to the replica, and nothing else.",
                id="runqueue.E017",
            )
        ]
    if ours[0] != 0:
        return [
            CheckWarning(
                f"{ROUTER} is not the first of DATABASE_ROUTERS: a router before it "
                "may send the reads of workers, the fence and submissions to a replica, "
                "where their own writes may not be yet.",
                hint=f"List {ROUTER} first (it routes runqueue's models only).",
                id="runqueue.W007",
            )
        ]
    return []
