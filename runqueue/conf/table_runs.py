"""The settings table's keys of a run's life outside the worker: what a
submit accepts, a session's line, the deadlines and retention of runs,
and scheduled work. Apart from the other topics so that each reads
whole; ``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import Setting

SUBMIT = "Submitting runs"
DEADLINES = "Deadlines and retention"
SESSIONS = "Sessions"
SCHEDULES = "Scheduled work"

SUBMIT_KEYS: tuple[Setting, ...] = (
    Setting(
        name="IDEMPOTENCY_KEY_RETENTION_SECONDS",
        kind=v.number(positive=True),
        default=86400,
        doc="how long an Idempotency-Key is remembered",
        section=SUBMIT,
    ),
    Setting(
        name="SUBMIT_LOCK_TIMEOUT_MS",
        kind=v.number(integer=True, positive=True),
        default=2000,
        doc="how long a submit waits on a concurrent one with the same key",
        section=SUBMIT,
    ),
    Setting(
        name="MAX_PAYLOAD_BYTES",
        kind=v.number(integer=True, positive=True),
        default=1048576,
        doc="a submitted payload's size limit, as JSON",
        section=SUBMIT,
    ),
)

DEADLINE_KEYS: tuple[Setting, ...] = (
    Setting(
        name="TERMINAL_RUN_RETENTION_SECONDS",
        kind=v.number(positive=True, none=True),
        default=None,
        doc="drop finished runs older than this, by whole days (`None` keeps them)",
        section=DEADLINES,
    ),
    Setting(
        name="START_WITHIN_SECONDS",
        kind=v.number(positive=True, none=True, bound=v.deadline_bound),
        default=None,
        doc="a run not claimed this long after it is due is cancelled, reason `expired` "
        '(docs/handlers.md, "Run deadlines"; `None`: no limit)',
        section=DEADLINES,
    ),
    Setting(
        name="MAX_DURATION_SECONDS",
        kind=v.number(positive=True, none=True, bound=v.deadline_bound),
        default=None,
        doc="an attempt running this long is cancelled and its run fails, reason "
        "`max_duration` (`None`: no limit)",
        section=DEADLINES,
    ),
)

SESSION_KEYS: tuple[Setting, ...] = (
    Setting(
        name="SESSION_ON_BUSY",
        kind=v.SESSION_ON_BUSY,
        default="reject",
        doc="what a submit to a busy session does when it does not say "
        '(docs/decisions/sessions.md, "Busy sessions: on_busy")',
        section=SESSIONS,
    ),
    Setting(
        name="SESSION_MAX_PENDING",
        kind=v.number(integer=True, positive=True, none=True),
        default=10,
        doc="pending turns one session may hold behind its active run (`SessionQueueFull`; "
        "the API: 409 `session-queue-full`; `None`: no limit)",
        section=SESSIONS,
    ),
)

SCHEDULE_KEYS: tuple[Setting, ...] = (
    Setting(
        name="SCHEDULES",
        kind=v.SCHEDULES,
        default=(),
        shown="{}",
        doc="recurring runs by name "
        '(docs/operations.md, "Scheduled work"; `runqueue/schedules/spec.py`)',
        section=SCHEDULES,
        checks=("runqueue.W020",),
    ),
    Setting(
        name="API_SCHEDULES_PER_TOKEN",
        kind=v.number(integer=True, positive=True, none=True),
        default=100,
        doc="schedules one API token may own that can still fire (a fired one-shot no longer "
        "counts); the next create gets 409 `schedule-limit-reached` (`None`: no bound)",
        section=SCHEDULES,
    ),
    Setting(
        name="HANDLER_SCHEDULES_PER_TENANT",
        kind=v.number(integer=True, positive=True, none=True),
        default=1000,
        doc="schedules handlers (`ctx.schedule`) may own in one tenant that can still fire; "
        "past it `ctx.schedule` raises `ScheduleRefused` (`None`: no bound)",
        section=SCHEDULES,
    ),
)
