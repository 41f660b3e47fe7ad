"""Day partitions of finished runs and of events: made ahead, dropped whole.

The layout (migration 0009, decisions/history.md "History and retention"):
``runqueue_run`` is partitioned by status into ``runqueue_run_live``
(queued, running, waiting for the user) and ``runqueue_run_finished``, which
is partitioned by day of ``finished_at``; ``runqueue_run_event`` is
partitioned by day of ``created_at``. Each has a default partition, so no
insert ever fails for want of a day.

``ensure`` makes the days ahead (moving any rows the default took for such
a day into it); ``prune`` drops every day wholly older than the retention:
a finished runs' day is detached (a short exclusive lock on
``runqueue_run_finished``), the runs of it still kept copied back (they land
in the default partition), the rows of every table keyed by the others
(``DEPENDANTS``) deleted by a join on the detached table, and dropped; an
events' day is detached, the few events of runs still kept (live, or
finished later) copied back (they land in the default partition), and
dropped. A run that is not terminal is in the live partition, so nothing of
it is ever dropped; nor is a finished run while any run of its tree is not
terminal or not past the retention (``_kept``: a tree goes whole, so a
parent never resumes with fewer children than it spawned, and a root and
its totals row outlive every run that records under them). Retention is by
whole days: a finished run is kept at least the retention and at most a day
more.

Partitions are found by name (``<parent>_pYYYYMMDD``, days in UTC); a day
detached by a prune that died before dropping it is finished by the next.
The statements name tables, so they are composed here with
``psycopg.sql.Identifier`` rather than kept in runqueue/sql/.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass, field

from django.db import OperationalError, connection, transaction
from psycopg import sql

from runqueue.db import sqlstate
from runqueue.sql import set_config

logger = logging.getLogger("runqueue.history.partitions")

#: Days made ahead of today by each maintenance.
AHEAD_DAYS = 3
#: How long a detach waits for the queue's statements to let go of the parent.
LOCK_TIMEOUT = "2s"
#: How long a summary waits for its day's lock (a VACUUM of the day holds
#: it; the summary is skipped then, and the VACUUM summarizes anyway).
SUMMARY_LOCK_TIMEOUT = "200ms"
DAY = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class DayPartitioned:
    """A table partitioned by day of ``column``, with a default partition."""

    parent: str
    column: str
    #: The BRIN on ``column`` (migration 0016), on the parent: each day's
    #: partition has its own, attached to it.
    brin: str

    @property
    def default(self) -> str:
        return f"{self.parent}_default"

    def name(self, day: dt.date) -> str:
        return f"{self.parent}_p{day:%Y%m%d}"

    def day_of(self, name: str) -> dt.date | None:
        match = re.fullmatch(re.escape(self.parent) + r"_p(\d{8})", name)
        return dt.datetime.strptime(match.group(1), "%Y%m%d").date() if match else None  # noqa: DTZ007


RUNS = DayPartitioned("runqueue_run_finished", "finished_at", "runqueue_run_finished_idx")
EVENTS = DayPartitioned("runqueue_run_event", "created_at", "runqueue_event_created_idx")
#: Tables whose rows belong to a run (run_id) and go when the run is
#: dropped: every table keyed by a run but the events, which are dropped
#: by day (a test holds this list to the models).
DEPENDANTS = (
    "runqueue_tool_invocation",
    "runqueue_checkpoint",
    "runqueue_idempotency_key",
    "runqueue_schedule_tick",
    "runqueue_signal",
    "runqueue_event_delivery",
    "runqueue_stream_watch",
    "runqueue_usage",
    "runqueue_tree_spend",
    "runqueue_webhook_target",
    "runqueue_webhook_delivery",
)
_LIVE = ("queued", "running", "waiting_for_user", "waiting", "pending")


def _start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def _run(statement: sql.Composable, params: dict | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(statement.as_string(connection.connection), params)
        return cursor.fetchall() if cursor.description else []


def _days(table: DayPartitioned, *, attached: bool) -> dict[dt.date, str]:
    """The table's day partitions (attached), or its detached leftovers."""
    if attached:
        query = sql.SQL(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = {}::regclass"
        ).format(sql.Literal(table.parent))
    else:
        query = sql.SQL(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND NOT relispartition"
            " AND relname LIKE {} AND relnamespace = current_schema()::regnamespace"
        ).format(sql.Literal(table.parent + "\\_p%"))
    names = (row[0] for row in _run(query))
    return {day: name for name in names if (day := table.day_of(name)) is not None}


def _today() -> dt.date:
    return _run(sql.SQL("SELECT (now() AT TIME ZONE 'UTC')::date"))[0][0]


def ensure(*, ahead: int = AHEAD_DAYS, today: dt.date | None = None) -> list[str]:
    """Make the day partitions of today and the next ``ahead`` days; return
    the names made. Rows the default partition took for such a day move
    into it, in the same transaction."""
    today = today or _today()
    made = []
    for table in (RUNS, EVENTS):
        have = _days(table, attached=True)
        for offset in range(ahead + 1):
            day = today + dt.timedelta(days=offset)
            if day not in have:
                _make(table, day)
                made.append(table.name(day))
    return made


def summarize(*, today: dt.date | None = None) -> dict[str, int]:
    """Summarize the BRIN ranges written since the last summary in the
    finished runs' and events' partitions of yesterday and today; return the
    ranges summarized per index (an index whose day a VACUUM holds: skipped).

    A BRIN range is summarized only by a VACUUM or by this; until then every
    read through the index reads all its pages. The dashboard reads its last
    hour of finished runs and claims through these BRINs, so on a day no
    VACUUM had summarized (autovacuum off, or behind) it read the whole day so
    far: at ten million runs, 192-273 ms against 93-97 summarized
    (docs/performance.md). The worker's housekeeping calls this each round.
    Yesterday too: its last minutes are written after the round before
    midnight."""
    today = today or _today()
    tables = (RUNS, EVENTS)
    days = [table.name(day) for table in tables for day in (today - DAY, today)]
    indexes = _run(
        sql.SQL(
            "SELECT x.relname FROM pg_inherits i"
            " JOIN pg_index ix ON ix.indexrelid = i.inhrelid"
            " JOIN pg_class x ON x.oid = ix.indexrelid"
            " JOIN pg_class t ON t.oid = ix.indrelid"
            " WHERE i.inhparent = ANY(%(brins)s::regclass[]) AND t.relname = ANY(%(days)s)"
            " AND t.relnamespace = current_schema()::regnamespace ORDER BY 1"
        ),
        {"brins": [table.brin for table in tables], "days": days},
    )
    summarized = {}
    for (name,) in indexes:
        try:
            with transaction.atomic():
                set_config(connection, "lock_timeout", SUMMARY_LOCK_TIMEOUT)
                rows = _run(
                    sql.SQL("SELECT brin_summarize_new_values({}::regclass)").format(
                        sql.Literal(name)
                    )
                )
        except OperationalError as exc:
            if sqlstate(exc) != "55P03":  # lock_not_available
                raise
            logger.info("Skipped summarizing %s: its day is locked (a VACUUM)", name)
            continue
        summarized[name] = rows[0][0]
    return summarized


def _make(table: DayPartitioned, day: dt.date) -> None:
    name, parent, default = (
        sql.Identifier(n) for n in (table.name(day), table.parent, table.default)
    )
    column = sql.Identifier(table.column)
    bounds = {"low": _start(day), "high": _start(day + DAY)}
    with transaction.atomic():
        set_config(connection, "lock_timeout", LOCK_TIMEOUT)
        # Writers of the parent wait until the day is attached. Without this
        # a row for the day routed to the default partition meanwhile (the
        # new partition not yet attached) would either fail the ATTACH or,
        # waiting for the default partition's lock, fail its own statement
        # once the day is attached: "violates partition constraint" (a
        # worker's finish, so a run's outcome). Waiting at the parent, a
        # writer routes its row afresh after the commit, into the new day.
        # Rows for a day exist before its partition only when housekeeping
        # fell behind the clock; the wait is as long as this transaction.
        _run(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(parent))
        # Made apart and attached: ATTACH locks the parent only against
        # other DDL (SHARE UPDATE EXCLUSIVE), and the default partition,
        # which it scans, is small.
        _run(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
                name, parent
            )
        )
        _run(
            sql.SQL(
                "WITH moved AS (DELETE FROM {default} WHERE {column} >= %(low)s"
                " AND {column} < %(high)s RETURNING *) INSERT INTO {name} SELECT * FROM moved"
            ).format(default=default, column=column, name=name),
            bounds,
        )
        _run(
            sql.SQL(
                "ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM (%(low)s) TO (%(high)s)"
            ).format(parent, name),
            bounds,
        )
    logger.info("Made partition %s", table.name(day))


@dataclass
class Pruned:
    """What one prune removed, and how long it held the parents' lock."""

    runs: int = 0
    #: Finished runs past the retention kept for a tree still in use (they
    #: wait in the default partition, looked at again by every prune).
    kept_runs: int = 0
    events: int = 0
    kept_events: int = 0
    days: list[str] = field(default_factory=list)
    lock_seconds: float = 0.0
    seconds: float = 0.0


def prune(*, older_than_seconds: float) -> Pruned:
    """Drop every finished-runs and events day wholly older than the
    retention, with everything of those runs; delete the default
    partitions' rows past it."""
    began = time.monotonic()
    result = Pruned()
    cutoff = _run(
        sql.SQL("SELECT now() - make_interval(secs => %(s)s)"), {"s": float(older_than_seconds)}
    )[0][0]
    for table in (RUNS, EVENTS):
        for day, name in sorted(_days(table, attached=True).items()):
            if _start(day + DAY) <= cutoff:
                if not _detach(table, name, result):
                    break
    # Every detached runs day is read by the walk up each tree (_kept)
    # until it is dropped: a parent may be in a later day than its child.
    detached = [name for _day, name in sorted(_days(RUNS, attached=False).items())]
    while detached:
        _drop_runs(detached[0], cutoff, detached, result)
        result.days.append(detached.pop(0))
    for day, name in sorted(_days(EVENTS, attached=False).items()):
        _drop_events(name, _start(day + DAY), result)
        result.days.append(name)
    _prune_defaults(cutoff, result)
    result.seconds = time.monotonic() - began
    return result


def _detach(table: DayPartitioned, name: str, result: Pruned) -> bool:
    """Detach one day; False when the lock was not had in LOCK_TIMEOUT."""
    began = time.monotonic()
    try:
        with transaction.atomic():
            set_config(connection, "lock_timeout", LOCK_TIMEOUT)
            # Plain DETACH: CONCURRENTLY is refused while a default
            # partition exists. The exclusive lock is held for a catalog
            # change only, no row is read.
            _run(
                sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                    sql.Identifier(table.parent), sql.Identifier(name)
                )
            )
    except OperationalError as exc:
        if sqlstate(exc) != "55P03":
            raise
        logger.warning("Could not detach %s within %s; next prune", name, LOCK_TIMEOUT)
        return False
    finally:
        result.lock_seconds += time.monotonic() - began
    return True


def _in(values: tuple[str, ...]) -> sql.Composable:
    return sql.SQL("({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values))


def _runs_read(detached: list[str]) -> sql.Composable:
    """Every run still stored: the runs table and the detached days."""
    columns = sql.SQL("id, parent_id, status, finished_at")
    parts = [sql.SQL("SELECT {} FROM runqueue_run").format(columns)]
    parts += [sql.SQL("SELECT {} FROM {}").format(columns, sql.Identifier(n)) for n in detached]
    return sql.SQL(" UNION ALL ").join(parts)


def _kept(
    source: sql.Composable, cutoff: dt.datetime, detached: list[str], within: sql.Composable
) -> list:
    """The ids of runs in ``source`` (those matching ``within``) past the
    retention but kept: a tree goes whole, once every run of it is terminal
    and past the retention. So a parent never resumes with fewer children
    than it spawned, and a root outlives every run of its tree: its totals
    row (runqueue_tree_spend) stays with the usage records that name it,
    and a live descendant still records under its cap. The walk goes up
    from each run to its root, one probe by id per level (an ancestor not
    found, dropped already, ends it: the last found stands for the root),
    then down each root's tree, one probe by parent per run."""
    # A walk over every partition: its estimated cost passes jit_above_cost,
    # and compiling it took longer than running it (5.6 of 9.2 s for a day
    # of 65,000 runs at 2,000,000; docs/performance.md). In the caller's
    # transaction, for that transaction only.
    set_config(connection, "jit", "off")
    runs = _runs_read(detached)
    rows = _run(
        sql.SQL(
            "WITH RECURSIVE up(id, node, parent_id, status, finished_at, depth) AS ("
            " SELECT d.id, d.id, d.parent_id, d.status, d.finished_at, 0"
            " FROM {source} d WHERE {within}"
            " UNION ALL"
            " SELECT up.id, a.id, a.parent_id, a.status, a.finished_at, up.depth + 1"
            " FROM up JOIN ({runs}) a ON a.id = up.parent_id WHERE up.parent_id IS NOT NULL),"
            " roots AS (SELECT DISTINCT ON (id) id, node, status, finished_at FROM up"
            " ORDER BY id, depth DESC),"
            " down(root, id, status, finished_at) AS ("
            " SELECT DISTINCT node, node, status, finished_at FROM roots"
            " UNION ALL"
            " SELECT down.root, c.id, c.status, c.finished_at"
            " FROM down JOIN ({runs}) c ON c.parent_id = down.id),"
            " used AS (SELECT DISTINCT root FROM down"
            " WHERE status IN {live} OR finished_at >= %(cutoff)s)"
            " SELECT roots.id FROM roots JOIN used ON used.root = roots.node"
        ).format(source=source, within=within, runs=runs, live=_in(_LIVE)),
        {"cutoff": cutoff},
    )
    return [row[0] for row in rows]


def _columns(table: str) -> sql.Composable:
    names = _run(
        sql.SQL(
            "SELECT attname FROM pg_attribute WHERE attrelid = {}::regclass"
            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        ).format(sql.Literal(table))
    )
    return sql.SQL(", ").join(sql.Identifier(row[0]) for row in names)


def _drop_runs(name: str, cutoff: dt.datetime, detached: list[str], result: Pruned) -> None:
    """Copy back the day's runs still kept (``_kept``), delete what belongs
    to the others, then drop the detached day."""
    day = sql.Identifier(name)
    with transaction.atomic():
        kept = _kept(day, cutoff, detached, sql.SQL("true"))
        if kept:
            # Into the runs table: the day is detached, so they land in the
            # default partition, where the next prunes look at them again.
            columns = _columns(name)
            _run(
                sql.SQL(
                    "INSERT INTO runqueue_run ({columns}) SELECT {columns} FROM {day}"
                    " WHERE id = ANY(%(ids)s::uuid[])"
                ).format(columns=columns, day=day),
                {"ids": kept},
            )
            _run(
                sql.SQL("DELETE FROM {} WHERE id = ANY(%(ids)s::uuid[])").format(day),
                {"ids": kept},
            )
        for dependant in DEPENDANTS:
            _run(
                sql.SQL("DELETE FROM {} t USING {} d WHERE t.run_id = d.id").format(
                    sql.Identifier(dependant), day
                )
            )
        result.runs += _run(sql.SQL("SELECT count(*) FROM {}").format(day))[0][0]
        _run(sql.SQL("DROP TABLE {}").format(day))


def _drop_events(name: str, end: dt.datetime, result: Pruned) -> None:
    """Copy back the events of runs still kept, then drop the detached day.

    A run still kept created before the day's end is live, finished after
    every day dropped (those are detached by now), or kept for its tree
    (``_kept``): all read through runqueue_run's created_at index, a
    handful of rows per partition.
    """
    day = sql.Identifier(name)
    columns = sql.SQL("id, type, lease_epoch, data, created_at, run_id")
    with transaction.atomic():
        kept = _run(
            sql.SQL(
                "WITH kept AS (INSERT INTO runqueue_run_event ({columns})"
                " SELECT {columns} FROM {day} e WHERE e.run_id IN"
                " (SELECT r.id FROM runqueue_run r WHERE r.created_at < %(end)s)"
                " RETURNING 1) SELECT count(*) FROM kept"
            ).format(columns=columns, day=day),
            {"end": end},
        )[0][0]
        total = _run(sql.SQL("SELECT count(*) FROM {}").format(day))[0][0]
        _run(sql.SQL("DROP TABLE {}").format(day))
    result.events += total - kept
    result.kept_events += kept


def _prune_defaults(cutoff: dt.datetime, result: Pruned) -> None:
    """Rows past the retention in the default partitions (a day nobody made
    in time): deleted row by row, as few as the days the maintenance missed."""
    default = sql.Identifier("runqueue_run_finished_default")
    with transaction.atomic():
        past = sql.SQL("d.finished_at < %(cutoff)s")
        kept = _kept(default, cutoff, [], past)
        result.kept_runs += len(kept)
        gone = _run(
            sql.SQL(
                "WITH gone AS (DELETE FROM {} WHERE finished_at < %(cutoff)s"
                " AND NOT id = ANY(%(kept)s::uuid[]) RETURNING id)"
                " SELECT coalesce(array_agg(id), ARRAY[]::uuid[]) FROM gone"
            ).format(default),
            {"cutoff": cutoff, "kept": kept},
        )[0][0]
        if gone:
            for dependant in DEPENDANTS:
                _run(
                    sql.SQL("DELETE FROM {} WHERE run_id = ANY(%(ids)s::uuid[])").format(
                        sql.Identifier(dependant)
                    ),
                    {"ids": gone},
                )
            _run(
                sql.SQL("DELETE FROM runqueue_run_event WHERE run_id = ANY(%(ids)s::uuid[])"),
                {"ids": gone},
            )
        result.runs += len(gone)
        # Events past the retention whose run is gone: copied back by an
        # earlier prune, or written on a day with no partition.
        result.events += len(
            _run(
                sql.SQL(
                    "DELETE FROM runqueue_run_event_default e WHERE e.created_at < %(cutoff)s"
                    " AND NOT EXISTS (SELECT 1 FROM runqueue_run r WHERE r.id = e.run_id)"
                    " RETURNING 1"
                ),
                {"cutoff": cutoff},
            )
        )
