"""Every ``RUNQUEUE`` key, declared once: its kind (type and validation),
default, one-line meaning and the system checks that look at it. The
settings object, its parser, the checks' cross-check and docs/settings.md
are made from this table.

The rows are declared by topic (``table_workers``, ``table_database``,
``table_runs``, ``table_http``, ``table_operations``); this module puts
them in the one order the settings object's fields and the reference's
sections follow, each group under its reference heading."""

from __future__ import annotations

from runqueue.conf import (
    table_database,
    table_http,
    table_operations,
    table_runs,
    table_workers,
)
from runqueue.conf.setting import Setting, section

SETTINGS: tuple[Setting, ...] = (
    *section("Workers and leases", table_workers.WORKER_KEYS),
    *section("Retries", table_workers.RETRY_KEYS),
    *section("Submitting runs", table_runs.SUBMIT_KEYS),
    *section("Database and poolers", table_database.DATABASE_KEYS),
    *section("Handlers", table_workers.HANDLER_KEYS),
    *section("Deadlines and retention", table_runs.DEADLINE_KEYS),
    *section("Sessions", table_runs.SESSION_KEYS),
    *section("HTTP API", table_http.API_KEYS),
    *section("Event streams", table_http.STREAM_KEYS),
    *section("Concurrency, budgets and cost", table_operations.SPENDING_KEYS),
    *section("Scheduled work", table_runs.SCHEDULE_KEYS),
    *section("Inbound events", table_http.EVENT_KEYS),
    *section("Observability", table_operations.OBSERVABILITY_KEYS),
    *section("Webhooks", table_http.WEBHOOK_KEYS),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
