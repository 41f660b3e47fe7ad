"""Every ``RUNQUEUE`` key, declared once: its kind (type and validation),
default, one-line meaning and the system checks that look at it. The
settings object, its parser, the checks' cross-check and docs/settings.md
are made from this table."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from runqueue.conf import values as v

#: The largest page the events endpoint serves, whatever a client asks for.
MAX_EVENTS_PAGE_SIZE = 1000
#: Bounds of STREAM_TEXT_FLUSH_BYTES: smaller makes a row per few tokens,
#: larger makes one event's text more than a reader should take at once.
MIN_TEXT_FLUSH_BYTES = 256
MAX_TEXT_FLUSH_BYTES = 1048576
#: STREAM_TEXT_FLUSH_MS at most a minute.
MAX_TEXT_FLUSH_MS = 60000


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One key of the ``RUNQUEUE`` dict."""

    name: str
    kind: v.Kind
    #: What the settings object holds when the key is left out.
    default: object
    #: One line for the reference.
    doc: str
    #: The reference's heading it is listed under.
    section: str
    #: The default as a project writes it, where that differs from ``default``.
    shown: str | None = None
    #: The system checks (besides runqueue.E002, a malformed value) about it.
    checks: tuple[str, ...] = ()


_EMPTY: MappingProxyType[object, object] = MappingProxyType({})

WORKERS = "Workers and leases"
RETRIES = "Retries"
SUBMIT = "Submitting runs"
SESSIONS = "Sessions"
DEADLINES = "Deadlines and retention"
DATABASE = "Database and poolers"
HANDLERS = "Handlers"
API = "HTTP API"
STREAMS = "Event streams"
SPENDING = "Concurrency, budgets and cost"
SCHEDULES = "Scheduled work"
EVENTS = "Inbound events"
OBSERVABILITY = "Observability"
WEBHOOKS = "Webhooks"

SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="LEASE_SECONDS",
        kind=v.number(positive=True),
        default=30,
        doc="a claim's lease; heartbeats renew it",
        section=WORKERS,
    ),
    Setting(
        name="HEARTBEAT_SECONDS",
        kind=v.number(positive=True),
        default=10,
        doc="how often a worker renews held leases (must be shorter than LEASE_SECONDS)",
        section=WORKERS,
    ),
    Setting(
        name="SWEEP_SECONDS",
        kind=v.number(positive=True),
        default=5,
        doc="how often a worker looks for expired leases (and runs its other maintenance)",
        section=WORKERS,
    ),
    Setting(
        name="POLL_SECONDS",
        kind=v.number(positive=True),
        default=2,
        doc="fallback poll when no NOTIFY arrives",
        section=WORKERS,
    ),
    Setting(
        name="GRACE_SECONDS",
        kind=v.number(),
        default=30,
        doc="on SIGTERM, how long in-flight runs may finish",
        section=WORKERS,
    ),
    Setting(
        name="MAX_ATTEMPTS",
        kind=v.number(integer=True, positive=True),
        default=3,
        doc="default `max_attempts` of a run",
        section=RETRIES,
    ),
    Setting(
        name="BACKOFF_BASE_SECONDS",
        kind=v.number(),
        default=2,
        doc="retry delay base: `base * 2**(attempts - 1)`",
        section=RETRIES,
    ),
    Setting(
        name="BACKOFF_MAX_SECONDS",
        kind=v.number(),
        default=600,
        doc="retry delay cap",
        section=RETRIES,
    ),
    Setting(
        name="BACKOFF_JITTER",
        kind=v.number(bound=v.below_one),
        default=0.2,
        doc="+/- fraction of random jitter on the retry delay, in [0, 1)",
        section=RETRIES,
    ),
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
    Setting(
        name="NOTIFY_CHANNEL",
        kind=v.NOTIFY_CHANNEL,
        default="runqueue",
        doc="the LISTEN/NOTIFY channel",
        section=DATABASE,
    ),
    Setting(
        name="LISTEN_DATABASE",
        kind=v.DATABASE_ALIAS,
        default=None,
        doc="the `DATABASES` alias the LISTEN connections (workers', event streams') open: a "
        "direct connection when `default` goes through a transaction pooler (`None`: `default`)",
        section=DATABASE,
        checks=("runqueue.E004", "runqueue.W005"),
    ),
    Setting(
        name="READ_DATABASE",
        kind=v.DATABASE_ALIAS,
        default=None,
        doc="the `DATABASES` alias of a replica the console's lists and dashboard, `/metrics` "
        "and the API's event, step and session reads read from (with "
        "`runqueue.reads.routing.ReadReplicaRouter` in `DATABASE_ROUTERS`); `None`: the primary",
        section=DATABASE,
        checks=("runqueue.E016", "runqueue.E017", "runqueue.W007"),
    ),
    Setting(
        name="READ_LAG_WARNING_SECONDS",
        kind=v.number(),
        default=5.0,
        doc="a read from the replica this far behind (or more) says so: a notice on the "
        "console's page, a `Runqueue-Read-Lag` header on the API's and `/metrics`' answers",
        section=DATABASE,
    ),
    Setting(
        name="READ_MAX_LAG_SECONDS",
        kind=v.number(none=True),
        default=60.0,
        doc="past this lag (or an unknown one) reads go to the primary instead of the "
        "replica (`None`: never, however far behind)",
        section=DATABASE,
    ),
    Setting(
        name="PREPARED_STATEMENTS",
        kind=v.MAYBE_BOOLEAN,
        default=None,
        doc="prepare the worker's hot statements (claim, fences, finishes) on the server; "
        '`None`: yes, unless `POOLER` is `"transaction"` without `POOLER_TRACKS_PREPARED`',
        section=DATABASE,
        checks=("runqueue.E005",),
    ),
    Setting(
        name="POOLER",
        kind=v.POOLER,
        default=None,
        doc="what the default database's connections go through: `None` (the server), "
        '`"session"` or `"transaction"` (a pooler in that mode, such as PgBouncer)',
        section=DATABASE,
        checks=("runqueue.E005", "runqueue.W005", "runqueue.W006"),
    ),
    Setting(
        name="POOLER_TRACKS_PREPARED",
        kind=v.BOOLEAN,
        default=False,
        doc="the transaction pooler carries protocol-level prepared statements (PgBouncer "
        "1.21+ with `max_prepared_statements` above 0)",
        section=DATABASE,
        checks=("runqueue.E005",),
    ),
    Setting(
        name="DURABLE_CLAIMS",
        kind=v.BOOLEAN,
        default=False,
        doc="a statement that only claims waits for its commit to reach the disk (and a "
        "synchronous standby); `False`: it does not, and the lease token fences a claim a "
        "crash lost (`docs/decisions/queue.md`)",
        section=DATABASE,
    ),
    Setting(
        name="HANDLER_MODULES",
        kind=v.STRINGS,
        default=(),
        shown="[]",
        doc="extra modules to import for handlers",
        section=HANDLERS,
    ),
    Setting(
        name="TRANSIENT_EXCEPTIONS",
        kind=v.STRINGS,
        default=(),
        shown="[]",
        doc="dotted exception classes a worker treats as transient",
        section=HANDLERS,
    ),
    Setting(
        name="EMIT_MAX_BYTES",
        kind=v.number(integer=True, positive=True),
        default=16384,
        doc="`ctx.emit`'s data limit, as JSON",
        section=HANDLERS,
    ),
    Setting(
        name="SIGNAL_MAX_BYTES",
        kind=v.number(integer=True, positive=True),
        default=65536,
        doc="a signal's data limit, as JSON (`runqueue.signal`: `SignalTooLarge`; the API: 413 "
        "`signal-too-large`)",
        section=HANDLERS,
    ),
    Setting(
        name="SIGNALS_KEPT_MAX",
        kind=v.number(integer=True, positive=True),
        default=100,
        doc="signals a run's mailbox keeps at most, waiting for a wait that names them "
        "(`MailboxFull`; the API: 429 `mailbox-full`); a signal the run waits for is "
        "delivered, not kept",
        section=HANDLERS,
    ),
    Setting(
        name="STREAM_TEXT_FLUSH_MS",
        kind=v.number(
            integer=True,
            positive=True,
            bound=v.at_most(
                MAX_TEXT_FLUSH_MS,
                " (a reconnecting client waits this long at most for text it missed)",
            ),
        ),
        default=1000,
        doc=f"`ctx.stream`'s text is stored (a `run.text` event) at most this often "
        f"(1-{MAX_TEXT_FLUSH_MS})",
        section=HANDLERS,
    ),
    Setting(
        name="STREAM_TEXT_FLUSH_BYTES",
        kind=v.number(
            integer=True,
            positive=True,
            bound=v.between(
                MIN_TEXT_FLUSH_BYTES, MAX_TEXT_FLUSH_BYTES, "one run.text event's text"
            ),
        ),
        default=8192,
        doc=f"... or once this many bytes are buffered "
        f"({MIN_TEXT_FLUSH_BYTES}-{MAX_TEXT_FLUSH_BYTES})",
        section=HANDLERS,
    ),
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
    Setting(
        name="API_MAX_BODY_BYTES",
        kind=v.number(integer=True, positive=True),
        default=262144,
        doc="larger request bodies get 413",
        section=API,
    ),
    Setting(
        name="API_SESSION_TENANT",
        kind=v.TENANT,
        default="default",
        doc="the tenant of session-authenticated (browser) users",
        section=API,
    ),
    Setting(
        name="API_EVENTS_PAGE_SIZE",
        kind=v.number(integer=True, positive=True, bound=v.at_most(MAX_EVENTS_PAGE_SIZE)),
        default=100,
        doc=f"the events page when no `limit` is given (at most {MAX_EVENTS_PAGE_SIZE})",
        section=API,
    ),
    Setting(
        name="API_KINDS",
        kind=v.API_KINDS,
        default=(),
        shown="[]",
        doc="the kinds it accepts (others: 422 `kind-not-allowed`), and whose runs (and their "
        "spawned children) it may cancel, signal and answer (others: 403 `run-not-writable`)",
        section=API,
        checks=("runqueue.W003",),
    ),
    Setting(
        name="API_SESSION_MAX_PRIORITY_CLASS",
        kind=v.CLASS_NAME,
        default=1,
        shown='"async"',
        doc="the most urgent class a browser session may submit to",
        section=API,
    ),
    Setting(
        name="STREAM_MAX_PER_PROCESS",
        kind=v.number(integer=True, positive=True),
        default=4,
        doc="event streams of live runs one web process serves at once; more get 503",
        section=STREAMS,
    ),
    Setting(
        name="STREAM_MAX_PER_TOKEN",
        kind=v.number(integer=True, positive=True, none=True),
        default=2,
        doc="event streams one API token (a session: its user) holds in one process; more get "
        "429 `stream-limit` (`None`: no bound)",
        section=STREAMS,
    ),
    Setting(
        name="STREAM_MAX_PER_TENANT",
        kind=v.number(integer=True, positive=True, none=True),
        default=None,
        doc="event streams one tenant holds in one process; more get 429 `stream-limit` "
        "(`None`: no bound)",
        section=STREAMS,
    ),
    Setting(
        name="STREAM_KEEPALIVE_SECONDS",
        kind=v.number(positive=True),
        default=15,
        doc="a quiet stream sends a `: keep-alive` comment this often",
        section=STREAMS,
    ),
    Setting(
        name="STREAM_POLL_SECONDS",
        kind=v.number(positive=True),
        default=5,
        doc="a stream reads again this often without a NOTIFY (the safety net)",
        section=STREAMS,
    ),
    Setting(
        name="STREAM_MAX_SECONDS",
        kind=v.number(positive=True),
        default=3600,
        doc="a stream is closed after this long; clients resume with `Last-Event-ID`",
        section=STREAMS,
    ),
    Setting(
        name="CONCURRENCY",
        kind=v.CONCURRENCY,
        default=_EMPTY,
        shown="{}",
        doc="cap per class name on the runs of one concurrency key running at once (`None`: "
        "no cap; `0` pauses every key without a limit)",
        section=SPENDING,
        checks=("runqueue.E003",),
    ),
    Setting(
        name="BUDGETS",
        kind=v.BUDGETS,
        default=_EMPTY,
        shown="{}",
        doc="budgets for model calls by key; a key's `Budget` row is made from its entry on "
        "first use, and the row (the admin's Budgets page) is the budget from then on",
        section=SPENDING,
    ),
    Setting(
        name="PRICES",
        kind=v.PRICES,
        default=_EMPTY,
        shown="{}",
        doc="model prices per million tokens: what `ctx.record_usage` charges a call recorded "
        "without a cost (a model without a price: cost unknown)",
        section=SPENDING,
    ),
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
    Setting(
        name="API_EVENTS",
        kind=v.EVENT_NAMES,
        default=(),
        shown="[]",
        doc="the event names `POST /api/events/<name>/` accepts (others: 404 "
        "`event-not-accepted`)",
        section=EVENTS,
    ),
    Setting(
        name="EVENT_MAX_BYTES",
        kind=v.number(integer=True, positive=True),
        default=65536,
        doc="an inbound event's body limit, in bytes (the API: 413 `event-too-large`; "
        "`runqueue.send_event`: `InvalidArgument`)",
        section=EVENTS,
    ),
    Setting(
        name="EVENT_RETENTION_SECONDS",
        kind=v.number(positive=True),
        default=86400,
        doc="how long an inbound event is kept: a second delivery with its key within it is a "
        "replay, and a wait that begins within it after the event arrived takes it",
        section=EVENTS,
    ),
    Setting(
        name="EVENT_VERIFIERS",
        kind=v.EVENT_VERIFIERS,
        default=_EMPTY,
        shown="{}",
        doc="the check of an event's signature, by name: a callable (or its dotted path) "
        "taking the request's headers and raw body, true to accept (the API: 401 "
        "`event-signature-invalid` otherwise); `runqueue.events.inbound.hmac_sha256` makes one",
        section=EVENTS,
    ),
    Setting(
        name="EVENT_KEY_FIELDS",
        kind=v.EVENT_KEY_FIELDS,
        default=_EMPTY,
        shown="{}",
        doc="by name, the body member whose value is the event's key when a delivery has no "
        "Idempotency-Key header (a provider's event id)",
        section=EVENTS,
    ),
    Setting(
        name="METRICS_TOKEN",
        kind=v.SECRET,
        default=None,
        doc="bearer token the web side's `/metrics` asks for (`None`: open)",
        section=OBSERVABILITY,
    ),
    Setting(
        name="TRACE_GENAI",
        kind=v.BOOLEAN,
        default=False,
        doc="put OpenTelemetry's GenAI attributes (`gen_ai.request.model`, "
        "`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`) of the usage a handler "
        "records on the run's span",
        section=OBSERVABILITY,
    ),
    Setting(
        name="WEBHOOK_ALLOW_HOSTS",
        kind=v.STRINGS,
        default=(),
        shown="[]",
        doc="hosts (names or addresses, as a webhook URL writes them) that may resolve to "
        "loopback, link-local, private or reserved addresses; every other webhook host must "
        'resolve to public addresses only (docs/operations.md, "Webhooks")',
        section=WEBHOOKS,
    ),
    Setting(
        name="WEBHOOK_TIMEOUT_SECONDS",
        kind=v.number(
            positive=True, bound=v.at_most(60, " (a delivery holds a maintenance slot)")
        ),
        default=5,
        doc="a webhook delivery's connect and read timeout; longer is a failed try",
        section=WEBHOOKS,
    ),
    Setting(
        name="WEBHOOK_SECRET_OVERLAP_SECONDS",
        kind=v.number(positive=True),
        default=86400,
        doc="how long a rotated endpoint secret still signs deliveries beside the new one",
        section=WEBHOOKS,
    ),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
