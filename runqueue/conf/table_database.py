"""The settings table's keys of the database: the NOTIFY channel, the
LISTEN and replica aliases, poolers and prepared statements, durable
claims. Apart from the other topics so that each reads whole;
``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import Setting

DATABASE = "Database and poolers"

DATABASE_KEYS: tuple[Setting, ...] = (
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
)
