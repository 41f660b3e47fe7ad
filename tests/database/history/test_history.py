"""History and retention (migration 0009, runqueue.history.partitions): finished runs
and events live in day partitions dropped whole; what is not terminal is
never dropped; an insert on a day nobody made a partition for succeeds; the
migration keeps the rows it found; the console and the metrics read
through indexes with history in the tables."""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import runqueue
from runqueue import leases, testing
from runqueue.admin.pagination import COUNT_CAP
from runqueue.admin.runs import id_range
from runqueue.errors import ActiveRunConflict, InvalidTransition
from runqueue.history import partitions
from runqueue.models import (
    Checkpoint,
    EventLog,
    IdempotencyKey,
    Run,
    RunEvent,
    RunStatus,
    ToolInvocation,
)
from runqueue.submission.submit import SubmitRequest
from tests.helpers import CLAIM_CLEARED, Worker, event_types, is_blocked, wait_until

pytestmark = pytest.mark.django_db

DAY = dt.timedelta(days=1)


def _where(table: str, column: str, value: object) -> str:
    """The partition a row is stored in."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tableoid::regclass::text FROM {table} WHERE {column} = %s", [value]
        )  # noqa: S608
        return cursor.fetchone()[0]


def _today() -> dt.date:
    return timezone.now().astimezone(dt.UTC).date()


def _run_with_history(status: str, at: dt.datetime, **fields: object) -> Run:
    """A run with three events, a tool invocation, a checkpoint and a key,
    all written at ``at``."""
    terminal = status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
    run = Run.objects.create(
        kind="k",
        status=status,
        concurrency_key="t",
        created_at=at,
        started_at=at,
        finished_at=at + dt.timedelta(seconds=5) if terminal else None,
        lease_epoch=1,
        attempts=1,
        **fields,
    )
    for type_ in ("run.created", "run.claimed", "run.waiting" if not terminal else "run.done"):
        RunEvent.objects.create(run=run, type=type_, lease_epoch=1, created_at=at)
    ToolInvocation.objects.create(
        run=run, seq=0, tool="search", idempotency="idempotent", lease_epoch=1, created_at=at
    )
    Checkpoint.objects.create(run=run, seq=0, state={"step": 1}, lease_epoch=1, created_at=at)
    IdempotencyKey.objects.create(
        tenant="default",
        key=f"key-{run.id}",
        request_hash="h",
        run=run,
        outcome="created",
        expires_at=timezone.now() + 365 * DAY,
    )
    return run


def _rows_of(run: Run) -> tuple[int, int, int, int, int]:
    return (
        Run.objects.filter(pk=run.pk).count(),
        EventLog.objects.filter(run_id=run.pk).count(),
        ToolInvocation.objects.filter(run_id=run.pk).count(),
        Checkpoint.objects.filter(run_id=run.pk).count(),
        IdempotencyKey.objects.filter(run_id=run.pk).count(),
    )


def test_a_run_waiting_for_its_user_past_the_retention_keeps_all_its_rows() -> None:
    today = _today()
    partitions.ensure(today=today - 12 * DAY, ahead=12)  # the days of the last two weeks
    eight_days_ago = timezone.now() - 8 * DAY
    waiting = _run_with_history(RunStatus.WAITING_FOR_USER, eight_days_ago, session_id="s1")
    finished = _run_with_history(RunStatus.SUCCEEDED, eight_days_ago, session_id="s2")
    # Begun on the day dropped, finished days later: kept, with that day's events.
    later = _run_with_history(RunStatus.SUCCEEDED, eight_days_ago)
    Run.objects.filter(pk=later.pk).update(finished_at=timezone.now() - 2 * DAY)
    event_day = partitions.EVENTS.name((eight_days_ago.astimezone(dt.UTC)).date())
    assert _where("runqueue_run_event", "run_id", finished.pk) == event_day
    assert _where("runqueue_run", "id", finished.pk) == partitions.RUNS.name(
        (finished.finished_at.astimezone(dt.UTC)).date()
    )

    pruned = partitions.prune(older_than_seconds=5 * 86400)

    assert pruned.runs == 1 and event_day in pruned.days
    assert _rows_of(finished) == (0, 0, 0, 0, 0)
    assert _rows_of(waiting) == (1, 3, 1, 1, 1)
    assert _rows_of(later) == (1, 3, 1, 1, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [event_day])
        assert cursor.fetchone()[0] is None  # the day is dropped, not emptied row by row
    # The kept events are read as before, in their order.
    assert [e.type for e in EventLog.objects.filter(run=waiting)] == [
        "run.created",
        "run.claimed",
        "run.waiting",
    ]
    # And its user answers: the same run resumes, with its session slot.
    answer = runqueue.submit(kind="k", session_id="s1", payload={"text": "yes"})
    assert (answer.outcome, answer.run.id) == ("input_delivered", waiting.pk)
    assert Run.objects.get(pk=waiting.pk).status == RunStatus.QUEUED


def test_an_insert_on_a_day_with_no_partition_yet_succeeds_and_moves_into_its_day() -> None:
    day = _today() - 20 * DAY
    at = dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC)
    run = _run_with_history(RunStatus.FAILED, at)
    assert _where("runqueue_run", "id", run.pk) == "runqueue_run_finished_default"
    assert _where("runqueue_run_event", "run_id", run.pk) == "runqueue_run_event_default"

    made = partitions.ensure(today=day, ahead=0)

    assert made == [partitions.RUNS.name(day), partitions.EVENTS.name(day)]
    assert _where("runqueue_run", "id", run.pk) == partitions.RUNS.name(day)
    assert _where("runqueue_run_event", "run_id", run.pk) == partitions.EVENTS.name(day)
    assert Run.objects.get(pk=run.pk).status == RunStatus.FAILED
    assert partitions.ensure(today=day, ahead=0) == []  # made once


def test_retention_deletes_default_rows_past_it_and_keeps_the_rest() -> None:
    old = _run_with_history(RunStatus.CANCELLED, timezone.now() - 30 * DAY)
    recent = _run_with_history(RunStatus.CANCELLED, timezone.now() - 3 * DAY)
    assert _where("runqueue_run", "id", old.pk) == "runqueue_run_finished_default"

    partitions.prune(older_than_seconds=10 * 86400)

    assert _rows_of(old) == (0, 0, 0, 0, 0)
    assert _rows_of(recent) == (1, 3, 1, 1, 1)


def test_runqueue_prune_runs_the_retention_once(settings, capsys) -> None:
    old = _run_with_history(RunStatus.SUCCEEDED, timezone.now() - 30 * DAY)
    settings.RUNQUEUE = {}
    with pytest.raises(CommandError, match="TERMINAL_RUN_RETENTION_SECONDS is not set"):
        call_command("runqueue_prune")
    assert Run.objects.filter(pk=old.pk).exists()
    with pytest.raises(CommandError, match="must be 0 or more"):
        call_command("runqueue_prune", "--older-than", "-5")
    call_command("runqueue_prune", "--older-than", str(10 * 86400))
    assert "1 runs" in capsys.readouterr().out
    assert not Run.objects.filter(pk=old.pk).exists()


def test_a_run_moves_between_partitions_as_its_status_changes() -> None:
    sub = runqueue.submit(kind="k", session_id="moves")
    assert _where("runqueue_run", "id", sub.run.id) == "runqueue_run_live"
    lease = leases.claim_one("w")
    testing.fail(lease, leases.permanent_failure(ValueError("boom"), lease.attempt))
    assert _where("runqueue_run", "id", sub.run.id) == partitions.RUNS.name(_today())
    assert Run.objects.get(pk=sub.run.id).status == RunStatus.FAILED
    leases.requeue(sub.run.id, actor="ann")
    assert _where("runqueue_run", "id", sub.run.id) == "runqueue_run_live"
    with pytest.raises(ActiveRunConflict):
        runqueue.submit(kind="k", session_id="moves")


def test_a_status_outside_the_lists_is_refused_by_its_check() -> None:
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError, match="runqueue_run_status_valid"), transaction.atomic():
        Run.objects.create(kind="k", status="exploded", concurrency_key="t")


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        (
            "1f2e3d4c",
            ("1f2e3d4c-0000-0000-0000-000000000000", "1f2e3d4c-ffff-ffff-ffff-ffffffffffff"),
        ),
        (
            "1F2E3D4C-5B6A",
            ("1f2e3d4c-5b6a-0000-0000-000000000000", "1f2e3d4c-5b6a-ffff-ffff-ffffffffffff"),
        ),
        ("1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b", ("1f2e3d4c-5b6a-4789-8a9b-0c1d2e3f4a5b",) * 2),
        ("1f2e3d4", None),  # shorter than the list shows
        ("conv-1234", None),
        ("1f2e3d4g", None),
    ],
)
def test_a_search_term_stands_for_an_id_range(term: str, expected: tuple | None) -> None:
    got = id_range(term)
    assert (None if got is None else tuple(str(u) for u in got)) == expected


def test_the_console_finds_a_run_by_its_id_prefix(admin_client: Client) -> None:
    wanted = runqueue.submit(kind="k").run
    other = Run.objects.create(
        id=uuid.UUID(int=wanted.id.int ^ (1 << 100)), kind="k", concurrency_key="t"
    )
    url = reverse("admin:runqueue_run_changelist")
    page = admin_client.get(url, {"q": str(wanted.id)[:8]}).content.decode()
    assert str(wanted.id) in page and str(other.id) not in page


# --- plans at scale ----------------------------------------------------------

HISTORY_RUNS = 200_000


@pytest.fixture
def history(transactional_db) -> Iterator[None]:
    """Ten days of history in day partitions, analyzed."""
    from tools.bench.history import load

    partitions.ensure(today=_today() - 11 * DAY, ahead=14)
    load(runs=HISTORY_RUNS, days=10, batch=100_000, echo=lambda _line: None)
    # A backlog beside the history, so the live partition is no small table
    # either: a plan that reads it sequentially would show.
    runqueue.submit_many([SubmitRequest(kind="k", session_id=f"live-{i}") for i in range(300)])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, kind, payload,"
            " status, priority, attempts, max_attempts, lease_epoch, lease_owner, created_at)"
            " SELECT gen_random_uuid(), 'backlog', 'backlog', '', 'k', '{}', 'queued', g % 30,"
            " 0, 3, 0, '', now() - make_interval(secs => g) FROM generate_series(1, 50000) g"
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE runqueue_run")
        cursor.execute("VACUUM ANALYZE runqueue_run_event")
    yield


def _nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


#: A day partition of at most this many pages (after the fixture's ANALYZE),
#: or of at most a quarter of the largest day's of its table, may be read
#: sequentially: it is cheaper than an index there. Today's partitions, early
#: in a UTC day, hold the day's first hours (the dashboard's last hour of
#: claims is most of today's events then); a past day is whole, and checked.
SMALL_DAY_PAGES = 16
SMALL_DAY_SHARE = 4
#: An event day is read by time through its BRIN index (created_at), whose
#: one range covers 128 pages (the default pages_per_range): a day of events
#: smaller than that is read whole by the BRIN scan too, so the planner
#: rightly scans it. Since migration 0024 a day of this fixture's events is
#: ~40 pages (the failed and cancelled runs' claims and ends; the rest are on
#: the runs' rows), so today's day passes SMALL_DAY_PAGES by mid-morning UTC.
EVENT_DAY_BRIN_PAGES = 128


def _sequential_reads(
    sql: str, params: tuple | list | None, *, live_filter: bool = False
) -> list[str]:
    """Tables of the run, event and tool families a query reads sequentially
    for more than it returns, run with EXPLAIN ANALYZE (a scan the executor
    never started reads nothing and is not counted).

    A day of history, an event or a tool table: never, unless a few pages
    (a day not reached yet, or barely begun), or read without a filter up to
    the console's count cap and no further (a capped count reads what it
    counts), or a filter that keeps at least as many rows as it discards
    (today's day early in the day, for the last hour). The live
    partition: only a scan that discards no more rows than it keeps
    (counting the backlog up to the cap, or every live run for the
    dashboard, reads what it shows); a filter that throws most of the live
    partition away must use an index.
    """
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        document = cursor.fetchone()[0]
    if isinstance(document, str):
        document = json.loads(document)
    found = []
    for node in _nodes(document[0]["Plan"]):
        table = node.get("Relation Name", "")
        if node["Node Type"] != "Seq Scan" or not table.startswith(
            ("runqueue_run", "runqueue_tool_invocation", "runqueue_checkpoint")
        ):
            continue
        if not node.get("Actual Loops"):
            continue  # planned, never run: it read nothing
        if table == "runqueue_run_live":
            if live_filter:
                continue
            kept = node["Actual Rows"] * node["Actual Loops"]
            if node.get("Rows Removed by Filter", 0) > kept + 100:
                found.append(table)
            continue
        read = node["Actual Rows"] * node["Actual Loops"]
        removed = node.get("Rows Removed by Filter", 0)
        if not removed and read <= COUNT_CAP + 1:
            # No filter, stopped within the console's capped count: it read
            # what it returned (the count's first day, in the planner's pick
            # of a seq scan or an index-only scan, a toss-up of statistics).
            continue
        if removed <= read:
            # Most of the day is in the filter's range (today's partition in
            # the first hours of the day, for the dashboard's last hour): it
            # read what it returned, as a live scan may.
            continue
        with connection.cursor() as cursor:
            # A day with a few pages of runs (the oldest day loaded starts
            # late in it when the tests run late in the day) is read whole
            # faster than through an index: the planner rightly scans it.
            cursor.execute(
                "SELECT relpages, (SELECT max(relpages) FROM pg_class WHERE relname LIKE %s)"
                "  FROM pg_class WHERE relname = %s",
                [table.rstrip("0123456789") + "%", table],
            )
            pages, largest = cursor.fetchone()
            if table.startswith("runqueue_run_event_p") and pages <= EVENT_DAY_BRIN_PAGES:
                continue
            if pages > max(SMALL_DAY_PAGES, (largest or 0) // SMALL_DAY_SHARE):
                found.append(table)
    return found


#: The kind and class filters have indexes on the finished days only: on the
#: live partition they would be written by every claim (decisions.md,
#: "History and retention"). There they filter the live partition itself,
#: the backlog and no history; the count stops at the cap.
CLASS_FILTER = "?class=10"
KIND_FILTER = "?kind=research.job"


@pytest.mark.slow
def test_no_admin_or_metrics_query_reads_a_history_table_sequentially(history) -> None:
    from django.contrib.auth.models import User

    user = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(user)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, session_id, tenant, principal FROM runqueue_run"
            " WHERE status = 'failed' AND finished_at > now() - interval '3 days' LIMIT 1"
        )
        run_id, session, tenant, principal = cursor.fetchone()
    runs = reverse("admin:runqueue_run_changelist")
    pages = [
        runs,
        runs + "?status__exact=failed",
        runs + "?status__exact=queued",
        runs + "?status__exact=waiting_for_user",
        runs + CLASS_FILTER,
        runs + f"?tenant={tenant}",
        runs + KIND_FILTER,
        runs + "?p=50",
        runs + f"?q={session}",
        runs + f"?q={run_id}",
        runs + f"?q={str(run_id)[:8]}",
        runs + f"?q={tenant}",
        runs + f"?q={principal}",
        reverse("admin:runqueue_deadletteredrun_changelist"),
        reverse("admin:runqueue_deadletteredrun_changelist") + "?p=5",
        reverse("admin:runqueue_uncertainrun_changelist"),
        reverse("admin:runqueue_run_change", args=[run_id]),
        reverse("admin:runqueue_run_dashboard"),
        "/metrics",
    ]
    checked = 0
    for page in pages:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(page)
        assert response.status_code == 200, page
        for query in ctx.captured_queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "runqueue_" not in sql:
                continue
            if sql.lstrip().upper().startswith("EXPLAIN"):
                continue
            # Captured SQL has its values inlined: plan it as it ran.
            live_filter = page.endswith((CLASS_FILTER, KIND_FILTER))
            assert _sequential_reads(sql, None, live_filter=live_filter) == [], f"{page}:\n{sql}"
            checked += 1
    assert checked >= len(pages)


# --- a row moved between partitions while another statement waits for it ----

FINISH_HOLDING = (
    "UPDATE runqueue_run SET status = 'succeeded', finished_at = now(), lease_owner = '',"
    " lease_expires_at = NULL WHERE id = %s"
)
CANCEL_HOLDING = (
    "UPDATE runqueue_run SET status = 'cancelled', lease_epoch = lease_epoch + 1,"
    " finished_at = now(), lease_owner = '', lease_expires_at = NULL, "
    + CLAIM_CLEARED
    + " WHERE id = %s"
)


def _blocked_by(raw_connect, statement: str, run_id: uuid.UUID, fn):
    """``fn`` in a thread, waiting for another transaction that moves the
    run's row to a finished day; that transaction commits once it waits."""
    holder = raw_connect(autocommit=False)
    holder.execute(statement, [run_id])
    worker = Worker(fn, name="waiter")
    worker.start()
    worker.started_fn.wait(30)
    wait_until(lambda: is_blocked(worker.backend_pid), what="the waiter to block")
    holder.commit()
    return worker.outcome()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_waiting_for_a_finish_that_moved_the_row_is_refused_cleanly(
    raw_connect,
) -> None:
    runqueue.submit(kind="k")
    lease = leases.claim_one("w")
    with pytest.raises(InvalidTransition) as excinfo:
        _blocked_by(
            raw_connect,
            FINISH_HOLDING,
            lease.run_id,
            lambda: leases.cancel(lease.run_id, reason="stop", actor="ann"),
        )
    assert excinfo.value.status == RunStatus.SUCCEEDED  # not a serialization error
    assert Run.objects.get(pk=lease.run_id).status == RunStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_waiting_for_a_cancel_that_moved_the_row_is_fenced(raw_connect) -> None:
    runqueue.submit(kind="k")
    lease = leases.claim_one("w")
    assert (
        _blocked_by(raw_connect, CANCEL_HOLDING, lease.run_id, lambda: leases.heartbeat(lease))
        is False
    )
    assert "run.fenced" in event_types(lease.run_id)
    assert Run.objects.get(pk=lease.run_id).status == RunStatus.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_rows_made_before_the_migration_are_read_after_it() -> None:
    """0009 copies the runs and events it finds into the partitions."""
    from django.db.migrations.executor import MigrationExecutor

    def migrate(target: str | None) -> None:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        if target is None:  # the latest
            (leaf,) = [n for n in executor.loader.graph.leaf_nodes() if n[0] == "runqueue"]
            target = leaf[1]
        executor.migrate([("runqueue", target)])

    migrate("0008_worker_cancelled_slots")
    try:
        queued, failed = uuid.uuid4(), uuid.uuid4()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, session_id,"
                " kind, payload, status, priority, attempts, max_attempts, lease_epoch,"
                " lease_owner, created_at, finished_at, failure)"
                " VALUES (%s, 't', 't', '', 's', 'k', '{}', 'queued', 0, 0, 3, 0, '', now(),"
                " NULL, NULL),"
                " (%s, 't', 't', '', 'old', 'k', '{}', 'failed', 0, 1, 1, 1, '',"
                " now() - interval '3 days', now() - interval '3 days', '{\"message\": \"x\"}')",
                [queued, failed],
            )
            cursor.execute(
                "INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)"
                " VALUES (%s, 'run.created', 0, '{}', now()),"
                " (%s, 'run.failed', 1, '{}', now() - interval '3 days')",
                [queued, failed],
            )
    finally:
        migrate(None)
    assert Run.objects.get(pk=queued).status == RunStatus.QUEUED
    assert Run.objects.get(pk=failed).failure == {"message": "x"}
    assert _where("runqueue_run", "id", queued) == "runqueue_run_live"
    three_days_ago = _today() - 3 * DAY
    assert _where("runqueue_run", "id", failed) == partitions.RUNS.name(three_days_ago)
    assert [e.type for e in EventLog.objects.filter(run_id=failed)] == ["run.failed"]
    assert _where("runqueue_run_event", "run_id", failed) == partitions.EVENTS.name(three_days_ago)
    # The session's active run still holds its slot, and events get new ids.
    with pytest.raises(ActiveRunConflict):
        runqueue.submit(kind="k", tenant="t", session_id="s")
    event = RunEvent.objects.create(run_id=queued, type="run.later", lease_epoch=0)
    assert event.id > max(e.id for e in EventLog.objects.exclude(pk=event.pk))


_WRITES = {
    "runs": (
        "INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, kind, payload, status,"
        " priority, attempts, max_attempts, lease_epoch, lease_owner, created_at, finished_at)"
        " VALUES (%(id)s, 't', 't', '', 'k', '{}', 'succeeded', 10, 1, 3, 1, '', %(at)s, %(at)s)",
        "runqueue_run",
        "id",
        partitions.RUNS,
    ),
    "events": (
        "INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)"
        " VALUES (%(id)s, 'run.created', 0, '{}', %(at)s)",
        "runqueue_run_event",
        "run_id",
        partitions.EVENTS,
    ),
}


@pytest.mark.parametrize("table", sorted(_WRITES))
def test_a_write_racing_the_making_of_its_day_lands_in_the_day(raw_connect, table) -> None:
    """A row for a day with no partition yet, written while housekeeping makes
    that day: it waits for the day to be attached and lands in it, never an
    error (a worker's finish writing it would otherwise fail with
    "violates partition constraint", routed to the default partition just
    before the attach)."""
    statement, parent, column, days = _WRITES[table]
    # A day of its own per table, long past (ensure makes both tables' days).
    day = _today() - (30 + sorted(_WRITES).index(table)) * DAY
    at = dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC)
    row_id = uuid.uuid4()
    writer = raw_connect()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            writer.execute(statement, {"id": row_id, "at": at})
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=write)
    try:
        with transaction.atomic():
            # The day made and attached, not yet committed: the writer comes now.
            assert days.name(day) in partitions.ensure(today=day, ahead=0)
            thread.start()
            wait_until(lambda: is_blocked(writer.info.backend_pid), what="the writer to wait")
        thread.join(30)
        assert not thread.is_alive()
        assert errors == []
        assert _where(parent, column, row_id) == days.name(day)
    finally:
        # The days made here are DDL: gone again, for the tests that follow.
        with connection.cursor() as cursor:
            for made in (partitions.RUNS, partitions.EVENTS):
                cursor.execute(f"DROP TABLE IF EXISTS {made.name(day)}")  # noqa: S608


def _brin_heap_blocks(day: str, low: dt.datetime) -> int:
    """Heap blocks a read of the day's finished runs since ``low`` takes
    through its BRIN (the dashboard's hour reads the same way)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            f"EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM {day}"  # noqa: S608
            " WHERE finished_at >= %s",
            [low],
        )
        plan = cursor.fetchone()[0][0]["Plan"]
    scans = [n for n in _nodes(plan) if n["Node Type"] == "Bitmap Heap Scan"]
    assert scans, plan  # the BRIN is the read
    return sum(n.get("Exact Heap Blocks", 0) + n.get("Lossy Heap Blocks", 0) for n in scans)


def _finished_in_order(day: dt.date, runs: int) -> str:
    """``runs`` finished runs on ``day``, written in the order they finished,
    a second apart from the day's start; the day's partition (analyzed)."""
    name = partitions.RUNS.name(day)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runqueue_run (id, tenant, concurrency_key, principal, kind, payload,"
            " status, priority, attempts, max_attempts, lease_epoch, lease_owner, created_at,"
            " finished_at)"
            " SELECT gen_random_uuid(), 'brin', 'brin', '', 'k', '{}', 'succeeded', 20, 1, 3, 1,"
            " '', %(start)s + make_interval(secs => g), %(start)s + make_interval(secs => g)"
            " FROM generate_series(1, %(runs)s) g",
            {"start": dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC), "runs": runs},
        )
        cursor.execute(f"ANALYZE {name}")  # noqa: S608
    return name


def test_a_summary_lets_the_last_hour_read_its_own_pages_of_the_day() -> None:
    """Rows written after a day's BRIN was made are in no summary until a
    VACUUM or ``partitions.summarize``: a read of the day's last hour reads
    the whole day. (A day ahead: no other test writes rows there, whose
    times would widen the ranges' summaries.)"""
    day = _today() + 2 * DAY
    partitions.ensure(today=_today(), ahead=3)
    name = _finished_in_order(day, 30_000)  # more than 8 hours: ~580 pages
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_relation_size('{name}') / current_setting('block_size')::int")
        (pages,) = cursor.fetchone()
    last_hour = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC) + dt.timedelta(seconds=26_400)
    assert pages >= 300
    # Nothing summarized but the first range (made with the index, and kept
    # up to date by the inserts into it): every page after it is read.
    assert _brin_heap_blocks(name, last_hour) >= pages - 128
    assert partitions.summarize(today=day)[f"{name}_finished_at_idx"] >= 3
    after = _brin_heap_blocks(name, last_hour)
    # The hour's rows (~70 pages) and the rest of their 128-page ranges.
    assert after <= 2 * 128, (after, pages)
    assert partitions.summarize(today=day)[f"{name}_finished_at_idx"] == 0  # nothing new


def test_housekeeping_summarizes_today() -> None:
    """The worker's housekeeping round leaves nothing of today's finished
    runs and events unsummarized."""
    from runqueue.history import housekeeping

    today = _today()
    partitions.ensure(today=today - DAY, ahead=1)
    name = _finished_in_order(today, 12_000)  # a few 128-page ranges
    housekeeping.maintain_partitions()
    left = partitions.summarize(today=today)
    assert left[f"{name}_finished_at_idx"] == 0
    assert left[f"{partitions.EVENTS.name(today)}_created_at_idx"] == 0


def test_a_summary_steps_over_a_day_a_vacuum_holds(raw_connect) -> None:
    """A VACUUM of the day holds the lock a summary takes: the summary of
    that day is skipped (the VACUUM summarizes it), the others made, and
    housekeeping does not wait behind it."""
    today = _today()
    partitions.ensure(today=today - DAY, ahead=1)
    day = partitions.RUNS.name(today)
    holder = raw_connect(autocommit=False)
    holder.execute(f"LOCK TABLE {day} IN SHARE UPDATE EXCLUSIVE MODE")  # a VACUUM's lock
    summarized = partitions.summarize(today=today)
    assert f"{day}_finished_at_idx" not in summarized
    assert f"{partitions.EVENTS.name(today)}_created_at_idx" in summarized
    holder.rollback()
    assert f"{day}_finished_at_idx" in partitions.summarize(today=today)
