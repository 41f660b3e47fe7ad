"""The settings table's keys of the web side: the HTTP API, its event
streams, inbound events and outbound webhooks. Apart from the other
topics so that each reads whole; ``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import EMPTY, Setting

#: The largest page the events endpoint serves, whatever a client asks for.
MAX_EVENTS_PAGE_SIZE = 1000

API = "HTTP API"
STREAMS = "Event streams"
EVENTS = "Inbound events"
WEBHOOKS = "Webhooks"

API_KEYS: tuple[Setting, ...] = (
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
)

STREAM_KEYS: tuple[Setting, ...] = (
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
)

EVENT_KEYS: tuple[Setting, ...] = (
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
        default=EMPTY,
        shown="{}",
        doc="the check of an event's signature, by name: a callable (or its dotted path) "
        "taking the request's headers and raw body, true to accept (the API: 401 "
        "`event-signature-invalid` otherwise); `runqueue.events.inbound.hmac_sha256` makes one",
        section=EVENTS,
    ),
    Setting(
        name="EVENT_KEY_FIELDS",
        kind=v.EVENT_KEY_FIELDS,
        default=EMPTY,
        shown="{}",
        doc="by name, the body member whose value is the event's key when a delivery has no "
        "Idempotency-Key header (a provider's event id)",
        section=EVENTS,
    ),
)

WEBHOOK_KEYS: tuple[Setting, ...] = (
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
