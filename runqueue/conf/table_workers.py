"""The settings table's keys of the worker: its leases and heartbeat, the
retries of a failed attempt, and what a handler may write (``ctx.emit``,
signals, ``ctx.stream``'s text). Apart from the other topics so that each
reads whole; ``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import Setting

#: Bounds of STREAM_TEXT_FLUSH_BYTES: smaller makes a row per few tokens,
#: larger makes one event's text more than a reader should take at once.
MIN_TEXT_FLUSH_BYTES = 256
MAX_TEXT_FLUSH_BYTES = 1048576
#: STREAM_TEXT_FLUSH_MS at most a minute.
MAX_TEXT_FLUSH_MS = 60000

WORKERS = "Workers and leases"
RETRIES = "Retries"
HANDLERS = "Handlers"

WORKER_KEYS: tuple[Setting, ...] = (
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
)

RETRY_KEYS: tuple[Setting, ...] = (
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
)

HANDLER_KEYS: tuple[Setting, ...] = (
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
)
