"""System checks: runqueue needs PostgreSQL and a well-formed RUNQUEUE dict."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register  # noqa: A004
from django.core.exceptions import ImproperlyConfigured
from django.db import connections


@register(Tags.database, Tags.compatibility)
def check_database(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Error]:
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
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Report a malformed RUNQUEUE dict as a check error, not a crash later."""
    from django.conf import settings

    from runqueue.conf import parse

    try:
        parse(getattr(settings, "RUNQUEUE", {}))
    except ImproperlyConfigured as exc:
        return [
            Error(
                str(exc),
                hint="See runqueue/conf.py or the README for the settings and their defaults.",
                id="runqueue.E002",
            )
        ]
    return []


@register()
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """A settings schedule naming a kind no handler is registered for would
    log an error at every tick instead of firing."""
    from django.conf import settings

    from runqueue import registry
    from runqueue.conf import parse

    try:
        specs = parse(getattr(settings, "RUNQUEUE", {})).SCHEDULES
    except ImproperlyConfigured:
        return []  # reported by check_settings
    return [
        Warning(
            f"RUNQUEUE['SCHEDULES'][{spec.name!r}] submits kind {spec.kind!r}, "
            "which no handler is registered for.",
            hint="Register it with @runqueue.handler, or list its module in "
            "RUNQUEUE['HANDLER_MODULES'].",
            id="runqueue.W020",
        )
        for spec in specs
        if not registry.is_registered(spec.kind)
    ]
