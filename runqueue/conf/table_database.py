"""The settings table's keys of the database: the NOTIFY channel, the
LISTEN and replica aliases, poolers and prepared statements, durable
claims. Apart from the other topics so that each reads whole;
``runqueue.conf.table`` assembles them."""

from __future__ import annotations

from runqueue.conf import values as v
from runqueue.conf.setting import Key, Keys

DATABASE_KEYS: Keys = {
    Key("NOTIFY_CHANNEL", v.NOTIFY_CHANNEL, "runqueue"): "the LISTEN/NOTIFY channel",
    Key("LISTEN_DATABASE", v.DATABASE_ALIAS, None, checks=("runqueue.E004", "runqueue.W005")): (
        "the `DATABASES` alias the LISTEN connections (workers', event streams') open: a "
        "direct connection when `default` goes through a transaction pooler (`None`: `default`)"
    ),
    Key(
        "READ_DATABASE",
        v.DATABASE_ALIAS,
        None,
        checks=("runqueue.E016", "runqueue.E017", "runqueue.W007"),
    ): (
        "the `DATABASES` alias of a replica the console's lists and dashboard, `/metrics` "
        "and the API's event, step and session reads read from (with "
        "`runqueue.reads.routing.ReadReplicaRouter` in `DATABASE_ROUTERS`); `None`: the primary"
    ),
    Key("READ_LAG_WARNING_SECONDS", v.NUMBER, 5.0): (
        "a read from the replica this far behind (or more) says so: a notice on the "
        "console's page, a `Runqueue-Read-Lag` header on the API's and `/metrics`' answers"
    ),
    Key("READ_MAX_LAG_SECONDS", v.number(none=True), 60.0): (
        "past this lag (or an unknown one) reads go to the primary instead of the "
        "replica (`None`: never, however far behind)"
    ),
    Key("PREPARED_STATEMENTS", v.MAYBE_BOOLEAN, None, checks=("runqueue.E005",)): (
        "prepare the worker's hot statements (claim, fences, finishes) on the server; "
        '`None`: yes, unless `POOLER` is `"transaction"` without `POOLER_TRACKS_PREPARED`'
    ),
    Key("POOLER", v.POOLER, None, checks=("runqueue.E005", "runqueue.W005", "runqueue.W006")): (
        "what the default database's connections go through: `None` (the server), "
        '`"session"` or `"transaction"` (a pooler in that mode, such as PgBouncer)'
    ),
    Key("POOLER_TRACKS_PREPARED", v.BOOLEAN, False, checks=("runqueue.E005",)): (
        "the transaction pooler carries protocol-level prepared statements (PgBouncer "
        "1.21+ with `max_prepared_statements` above 0)"
    ),
    Key("DURABLE_CLAIMS", v.BOOLEAN, False): (
        "a statement that only claims waits for its commit to reach the disk (and a "
        "synchronous standby); `False`: it does not, and the lease token fences a claim a "
        "crash lost (`docs/decisions/queue.md`)"
    ),
}
