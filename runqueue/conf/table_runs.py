"""The settings table's keys of a run's life outside the worker: what a
submit accepts, a session's line, the deadlines and retention of runs,
and scheduled work. Apart from the other topics so that each reads
whole; ``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import Key, Keys

#: A run deadline's kind: off (None), or a microsecond at least.
DEADLINE = v.number(positive=True, none=True, bound=v.deadline_bound)

SUBMIT_KEYS: Keys = {
    Key("IDEMPOTENCY_KEY_RETENTION_SECONDS", v.POSITIVE, 86400): (
        "how long an Idempotency-Key is remembered"
    ),
    Key("SUBMIT_LOCK_TIMEOUT_MS", v.COUNT, 2000): (
        "how long a submit waits on a concurrent one with the same key"
    ),
    Key("MAX_PAYLOAD_BYTES", v.COUNT, 1048576): "a submitted payload's size limit, as JSON",
}

DEADLINE_KEYS: Keys = {
    Key("TERMINAL_RUN_RETENTION_SECONDS", v.number(positive=True, none=True), None): (
        "drop finished runs older than this, by whole days (`None` keeps them)"
    ),
    Key("START_WITHIN_SECONDS", DEADLINE, None): (
        "a run not claimed this long after it is due is cancelled, reason `expired` "
        '(docs/handlers.md, "Run deadlines"; `None`: no limit)'
    ),
    Key("MAX_DURATION_SECONDS", DEADLINE, None): (
        "an attempt running this long is cancelled and its run fails, reason "
        "`max_duration` (`None`: no limit)"
    ),
}

SESSION_KEYS: Keys = {
    Key("SESSION_ON_BUSY", v.SESSION_ON_BUSY, "reject"): (
        "what a submit to a busy session does when it does not say "
        '(docs/decisions/sessions.md, "Busy sessions: on_busy")'
    ),
    Key("SESSION_MAX_PENDING", v.MAYBE_COUNT, 10): (
        "pending turns one session may hold behind its active run (`SessionQueueFull`; "
        "the API: 409 `session-queue-full`; `None`: no limit)"
    ),
}

SCHEDULE_KEYS: Keys = {
    Key("SCHEDULES", v.SCHEDULES, (), shown="{}", checks=("runqueue.W020",)): (
        "recurring runs by name "
        '(docs/operations.md, "Scheduled work"; `runqueue/schedules/spec.py`)'
    ),
    Key("API_SCHEDULES_PER_TOKEN", v.MAYBE_COUNT, 100): (
        "schedules one API token may own that can still fire (a fired one-shot no longer "
        "counts); the next create gets 409 `schedule-limit-reached` (`None`: no bound)"
    ),
    Key("HANDLER_SCHEDULES_PER_TENANT", v.MAYBE_COUNT, 1000): (
        "schedules handlers (`ctx.schedule`) may own in one tenant that can still fire; "
        "past it `ctx.schedule` raises `ScheduleRefused` (`None`: no bound)"
    ),
}
