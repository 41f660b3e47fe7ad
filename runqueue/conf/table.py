"""Every ``RUNQUEUE`` key, declared once: its kind (type and validation),
default, one-line meaning and the system checks that look at it. The
settings object, its parser, the checks' cross-check and docs/settings.md
are made from this table.

The rows are declared by topic (``table_workers``, ``table_database``,
``table_runs``, ``table_http``, ``table_operations``); this module puts
them in the one order the settings object's fields and the reference's
sections follow."""

from __future__ import annotations

from runqueue.conf import (
    table_database,
    table_http,
    table_operations,
    table_runs,
    table_workers,
)
from runqueue.conf.setting import Setting

SETTINGS: tuple[Setting, ...] = (
    *table_workers.WORKER_KEYS,
    *table_workers.RETRY_KEYS,
    *table_runs.SUBMIT_KEYS,
    *table_database.DATABASE_KEYS,
    *table_workers.HANDLER_KEYS,
    *table_runs.DEADLINE_KEYS,
    *table_runs.SESSION_KEYS,
    *table_http.API_KEYS,
    *table_http.STREAM_KEYS,
    *table_operations.SPENDING_KEYS,
    *table_runs.SCHEDULE_KEYS,
    *table_http.EVENT_KEYS,
    *table_operations.OBSERVABILITY_KEYS,
    *table_http.WEBHOOK_KEYS,
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
