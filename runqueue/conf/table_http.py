"""The settings table's keys of the web side: the HTTP API, its event
streams, inbound events and outbound webhooks. Apart from the other
topics so that each reads whole; ``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import EMPTY, Key, Keys

#: The largest page the events endpoint serves, whatever a client asks for.
MAX_EVENTS_PAGE_SIZE = 1000
EVENTS_PAGE_SIZE = v.number(integer=True, positive=True, bound=v.at_most(MAX_EVENTS_PAGE_SIZE))
#: A webhook delivery's timeout at most a minute.
WEBHOOK_TIMEOUT = v.number(
    positive=True, bound=v.at_most(60, " (a delivery holds a maintenance slot)")
)

API_KEYS: Keys = {
    Key("API_MAX_BODY_BYTES", v.COUNT, 262144): "larger request bodies get 413",
    Key("API_SESSION_TENANT", v.TENANT, "default"): (
        "the tenant of session-authenticated (browser) users"
    ),
    Key("API_EVENTS_PAGE_SIZE", EVENTS_PAGE_SIZE, 100): (
        f"the events page when no `limit` is given (at most {MAX_EVENTS_PAGE_SIZE})"
    ),
    Key("API_KINDS", v.API_KINDS, (), shown="[]", checks=("runqueue.W003",)): (
        "the kinds it accepts (others: 422 `kind-not-allowed`), and whose runs (and their "
        "spawned children) it may cancel, signal and answer (others: 403 `run-not-writable`)"
    ),
    Key("API_SESSION_MAX_PRIORITY_CLASS", v.CLASS_NAME, 1, shown='"async"'): (
        "the most urgent class a browser session may submit to"
    ),
}

STREAM_KEYS: Keys = {
    Key("STREAM_MAX_PER_PROCESS", v.COUNT, 4): (
        "event streams of live runs one web process serves at once; more get 503"
    ),
    Key("STREAM_MAX_PER_TOKEN", v.MAYBE_COUNT, 2): (
        "event streams one API token (a session: its user) holds in one process; more get "
        "429 `stream-limit` (`None`: no bound)"
    ),
    Key("STREAM_MAX_PER_TENANT", v.MAYBE_COUNT, None): (
        "event streams one tenant holds in one process; more get 429 `stream-limit` "
        "(`None`: no bound)"
    ),
    Key("STREAM_KEEPALIVE_SECONDS", v.POSITIVE, 15): (
        "a quiet stream sends a `: keep-alive` comment this often"
    ),
    Key("STREAM_POLL_SECONDS", v.POSITIVE, 5): (
        "a stream reads again this often without a NOTIFY (the safety net)"
    ),
    Key("STREAM_MAX_SECONDS", v.POSITIVE, 3600): (
        "a stream is closed after this long; clients resume with `Last-Event-ID`"
    ),
}

EVENT_KEYS: Keys = {
    Key("API_EVENTS", v.EVENT_NAMES, (), shown="[]"): (
        "the event names `POST /api/events/<name>/` accepts (others: 404 `event-not-accepted`)"
    ),
    Key("EVENT_MAX_BYTES", v.COUNT, 65536): (
        "an inbound event's body limit, in bytes (the API: 413 `event-too-large`; "
        "`runqueue.send_event`: `InvalidArgument`)"
    ),
    Key("EVENT_RETENTION_SECONDS", v.POSITIVE, 86400): (
        "how long an inbound event is kept: a second delivery with its key within it is a "
        "replay, and a wait that begins within it after the event arrived takes it"
    ),
    Key("EVENT_VERIFIERS", v.EVENT_VERIFIERS, EMPTY, shown="{}"): (
        "the check of an event's signature, by name: a callable (or its dotted path) "
        "taking the request's headers and raw body, true to accept (the API: 401 "
        "`event-signature-invalid` otherwise); `runqueue.events.inbound.hmac_sha256` makes one"
    ),
    Key("EVENT_KEY_FIELDS", v.EVENT_KEY_FIELDS, EMPTY, shown="{}"): (
        "by name, the body member whose value is the event's key when a delivery has no "
        "Idempotency-Key header (a provider's event id)"
    ),
}

WEBHOOK_KEYS: Keys = {
    Key("WEBHOOK_ALLOW_HOSTS", v.STRINGS, (), shown="[]"): (
        "hosts (names or addresses, as a webhook URL writes them) that may resolve to "
        "loopback, link-local, private or reserved addresses; every other webhook host must "
        'resolve to public addresses only (docs/operations.md, "Webhooks")'
    ),
    Key("WEBHOOK_TIMEOUT_SECONDS", WEBHOOK_TIMEOUT, 5): (
        "a webhook delivery's connect and read timeout; longer is a failed try"
    ),
    Key("WEBHOOK_SECRET_OVERLAP_SECONDS", v.POSITIVE, 86400): (
        "how long a rotated endpoint secret still signs deliveries beside the new one"
    ),
}
