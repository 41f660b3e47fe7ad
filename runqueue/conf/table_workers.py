"""The settings table's keys of the worker: its leases and heartbeat, the
retries of a failed attempt, and what a handler may write (``ctx.emit``,
signals, ``ctx.stream``'s text). Apart from the other topics so that each
reads whole; ``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import Key, Keys

#: Bounds of STREAM_TEXT_FLUSH_BYTES: smaller makes a row per few tokens,
#: larger makes one event's text more than a reader should take at once.
MIN_TEXT_FLUSH_BYTES = 256
MAX_TEXT_FLUSH_BYTES = 1048576
#: STREAM_TEXT_FLUSH_MS at most a minute.
MAX_TEXT_FLUSH_MS = 60000
TEXT_FLUSH_MS = v.number(
    integer=True,
    positive=True,
    bound=v.at_most(
        MAX_TEXT_FLUSH_MS, " (a reconnecting client waits this long at most for text it missed)"
    ),
)
TEXT_FLUSH_BYTES = v.number(
    integer=True,
    positive=True,
    bound=v.between(MIN_TEXT_FLUSH_BYTES, MAX_TEXT_FLUSH_BYTES, "one run.text event's text"),
)

WORKER_KEYS: Keys = {
    Key("LEASE_SECONDS", v.POSITIVE, 30): "a claim's lease; heartbeats renew it",
    Key("HEARTBEAT_SECONDS", v.POSITIVE, 10): (
        "how often a worker renews held leases (must be shorter than LEASE_SECONDS)"
    ),
    Key("SWEEP_SECONDS", v.POSITIVE, 5): (
        "how often a worker looks for expired leases (and runs its other maintenance)"
    ),
    Key("POLL_SECONDS", v.POSITIVE, 2): "fallback poll when no NOTIFY arrives",
    Key("GRACE_SECONDS", v.NUMBER, 30): "on SIGTERM, how long in-flight runs may finish",
}

RETRY_KEYS: Keys = {
    Key("MAX_ATTEMPTS", v.COUNT, 3): "default `max_attempts` of a run",
    Key("BACKOFF_BASE_SECONDS", v.NUMBER, 2): "retry delay base: `base * 2**(attempts - 1)`",
    Key("BACKOFF_MAX_SECONDS", v.NUMBER, 600): "retry delay cap",
    Key("BACKOFF_JITTER", v.number(bound=v.below_one), 0.2): (
        "+/- fraction of random jitter on the retry delay, in [0, 1)"
    ),
}

HANDLER_KEYS: Keys = {
    Key("HANDLER_MODULES", v.STRINGS, (), shown="[]"): "extra modules to import for handlers",
    Key("TRANSIENT_EXCEPTIONS", v.STRINGS, (), shown="[]"): (
        "dotted exception classes a worker treats as transient"
    ),
    Key("EMIT_MAX_BYTES", v.COUNT, 16384): "`ctx.emit`'s data limit, as JSON",
    Key("SIGNAL_MAX_BYTES", v.COUNT, 65536): (
        "a signal's data limit, as JSON (`runqueue.signal`: `SignalTooLarge`; the API: 413 "
        "`signal-too-large`)"
    ),
    Key("SIGNALS_KEPT_MAX", v.COUNT, 100): (
        "signals a run's mailbox keeps at most, waiting for a wait that names them "
        "(`MailboxFull`; the API: 429 `mailbox-full`); a signal the run waits for is "
        "delivered, not kept"
    ),
    Key("STREAM_TEXT_FLUSH_MS", TEXT_FLUSH_MS, 1000): (
        f"`ctx.stream`'s text is stored (a `run.text` event) at most this often "
        f"(1-{MAX_TEXT_FLUSH_MS})"
    ),
    Key("STREAM_TEXT_FLUSH_BYTES", TEXT_FLUSH_BYTES, 8192): (
        f"... or once this many bytes are buffered ({MIN_TEXT_FLUSH_BYTES}-{MAX_TEXT_FLUSH_BYTES})"
    ),
}
