"""Sub-agents with real ``runworker`` processes: a fan-out whose children
finish in several workers at once resumes its parent exactly once, a
deadline fires from the worker's deadline service and survives a kill -9,
a tree cancelled while its workers run is terminal at once, a fan-in
survives a worker killed at any point of it, and with the project's
defaults a fan-out neither runs its children one by one nor holds its
tenant's next turn behind them."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db import connection

import runqueue
from config import settings as project
from runqueue.models import TERMINAL_STATUSES, EventLog, Run, RunStatus, Worker
from tests.helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
SHORT_LEASE = ["--lease-seconds", "2", "--heartbeat-seconds", "0.5", "--sweep-seconds", "0.5"]


def _ledger(run_id, what: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE run_id = %s AND what = %s",
            [str(run_id), what],
        )
        return [row[0] for row in cursor.fetchall()]


def _status(run_id) -> str:
    return Run.objects.values_list("status", flat=True).get(id=run_id)


def test_children_finishing_in_several_workers_resume_the_parent_once(start_worker) -> None:
    workers = [
        start_worker(
            "--slots", "interactive=4", "--slots", "async=4", "--worker-id", f"W{i}", settings=FAST
        )
        for i in range(3)
    ]
    # Every worker up before the work arrives: the first one started would
    # otherwise take all of it, and the race this test is for would not run.
    wait_until(
        lambda: Worker.objects.filter(id__in=["W0", "W1", "W2"]).count() == 3,
        what="the three workers to register",
        timeout=60,
    )
    parents = [runqueue.submit(kind="test.fanout", payload={"n": 20}).run.id for _ in range(3)]
    for parent in parents:
        wait_until(
            lambda p=parent: _status(p) == "succeeded", what="the parent to resume", timeout=120
        )
    for parent in parents:
        run = Run.objects.get(id=parent)
        assert len(_ledger(parent, "resumed")) == 1
        assert EventLog.objects.filter(run_id=parent, type="run.resumed").count() == 1
        assert [c[1] for c in run.result["children"]] == ["succeeded"] * 20
        assert run.children_open == 0
        owners = set(
            EventLog.objects.filter(run__parent_id=parent, type="run.claimed").values_list(
                "data__owner", flat=True
            )
        )
        assert len({o.split("/")[0] for o in owners}) > 1  # several workers took part
    for worker in workers:
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()


def test_a_deadline_fires_in_a_worker_and_survives_a_kill_9(start_worker) -> None:
    quick = runqueue.submit(kind="test.wait_signal", payload={"timeout": 0.5}).run.id
    later = runqueue.submit(kind="test.wait_signal", payload={"timeout": 4}).run.id
    a = start_worker(*SHORT_LEASE, "--worker-id", "A", settings=FAST)
    wait_until(lambda: _status(quick) == "succeeded", what="the first deadline")
    assert Run.objects.get(id=quick).result == {"input": None, "timed_out": True}
    wait_until(lambda: _status(later) == "waiting", what="the second wait")
    a.send(signal.SIGKILL)
    a.wait()
    b = start_worker(*SHORT_LEASE, "--worker-id", "B", settings=FAST)
    wait_until(
        lambda: _status(later) == "succeeded", what="the deadline after the restart", timeout=60
    )
    assert Run.objects.get(id=later).result == {"input": None, "timed_out": True}
    # A signal delivered to a waiting run resumes it with the data.
    sent = runqueue.submit(kind="test.wait_signal", payload={"timeout": 60}).run.id
    wait_until(lambda: _status(sent) == "waiting", what="the third wait")
    assert runqueue.signal(sent, "go", {"ok": 1}) == "delivered"
    wait_until(lambda: _status(sent) == "succeeded", what="the signalled run")
    assert Run.objects.get(id=sent).result == {"input": {"ok": 1}, "timed_out": False}
    b.send(signal.SIGTERM)
    assert b.wait() == 0, b.output()


def _tree(root) -> list[Run]:
    found, level = [], [root]
    while level:
        runs = list(Run.objects.filter(parent_id__in=level))
        found.extend(runs)
        level = [r.id for r in runs]
    return found


def test_cancelling_a_tree_while_its_workers_run(start_worker) -> None:
    root = runqueue.submit(kind="test.tree", payload={"depth": 3, "width": 3}).run.id
    workers = [
        start_worker(
            "--slots",
            "interactive=12",
            "--slots",
            "async=12",
            "--worker-id",
            f"W{i}",
            settings=FAST,
        )
        for i in range(2)
    ]
    # Both started (their signal handlers installed): on a loaded machine one
    # worker can grow the tree while the other still imports Django, and a
    # SIGTERM then would kill it before it could stop cleanly.
    for worker in workers:
        wait_until(
            lambda w=worker: " started: slots " in w.output(),
            what="a worker to start",
            timeout=120,
        )
    wait_until(lambda: len(_tree(root)) >= 20, what="the tree to grow", timeout=120)
    runqueue.cancel(root, reason="stop the tree", actor="test")
    at_cancel = {r.id for r in _tree(root)}
    assert {r.status for r in _tree(root)} <= set(TERMINAL_STATUSES)
    assert _status(root) == RunStatus.CANCELLED
    # Running leaves are told (NOTIFY) and stop; nothing is spawned after.
    wait_until(
        lambda: not Run.objects.filter(id__in=at_cancel, lease_owner__gt="").exists(),
        what="every running descendant to be let go",
        timeout=60,
    )
    assert {r.id for r in _tree(root)} == at_cancel
    since = dt.datetime.now(dt.UTC)
    assert not Run.objects.filter(id__in=at_cancel, created_at__gt=since).exists()
    for worker in workers:
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()


# --- the project's defaults: caps, slots, a crash -------------------------------

#: The deployable project's caps (config/settings.py): one interactive run
#: per tenant at once. The worker settings the tests start from have none.
PROJECT = FAST | {"CONCURRENCY": project.RUNQUEUE["CONCURRENCY"]}


def _children(parent) -> list:
    return list(Run.objects.filter(parent_id=parent).values_list("id", flat=True))


def _release(run_id) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runqueue_test_ledger (run_id, what) VALUES (%s, 'release')",
            [str(run_id)],
        )


def test_with_the_projects_defaults_children_run_together_beside_their_tenants_turn(
    start_worker,
) -> None:
    """Issue 32: with one interactive run per tenant, an interactive
    parent's two children ran one after the other, and the tenant's next
    chat turn waited behind them. Children of an interactive run are async
    by default: both run at once on the async slots, and the tenant's turn
    is claimed while they still run."""
    assert PROJECT["CONCURRENCY"] == {"interactive": 1}
    worker = start_worker("--worker-id", "P", settings=PROJECT)  # the default slots
    parent = runqueue.submit(
        kind="test.fanout", tenant="acme", payload={"n": 2, "child": "test.block"}
    ).run.id
    wait_until(lambda: len(_children(parent)) == 2, what="the two children", timeout=60)
    children = _children(parent)
    # Each child holds its slot until released: both started means both ran at once.
    wait_until(
        lambda: all(_ledger(c, "started") for c in children),
        what="both children running at once",
        timeout=60,
    )
    turn = runqueue.submit(kind="chat.turn", tenant="acme").run.id
    wait_until(lambda: _status(turn) == "succeeded", what="the tenant's turn", timeout=60)
    assert Run.objects.filter(id__in=children, status="running").count() == 2
    for child in children:
        _release(child)
    wait_until(lambda: _status(parent) == "succeeded", what="the parent", timeout=60)
    assert [c[1] for c in Run.objects.get(id=parent).result["children"]] == ["succeeded"] * 2
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()


#: The shape of the report: one interactive slot, two async, one maintenance.
ONE_INTERACTIVE = ["--slots", "interactive=1", "--slots", "async=2", "--slots", "maintenance=1"]


def _killed_at(when: str, parent) -> bool:
    if when == "spawning":
        return len(_ledger(parent, "spawned")) >= 2
    if when == "child":
        return Run.objects.filter(parent_id=parent, status="running").exists()
    return bool(_ledger(parent, "resumed"))


@pytest.mark.parametrize("when", ["spawning", "child", "resumed"])
def test_a_fan_in_survives_a_worker_killed_at_any_point(start_worker, when: str) -> None:
    """Issue 32: four 1.5 s children, the worker killed with SIGKILL, a new
    worker started with a 5 s lease (its heartbeat follows the lease): the
    children are run again, each counts in the parent once, and the parent
    resumes once and ends, whether the kill came while the parent spawned,
    while a child ran, or while the resumed parent ran."""
    a = start_worker(*ONE_INTERACTIVE, *SHORT_LEASE, "--worker-id", "A", settings=PROJECT)
    payload: dict = {"n": 4, "child": "test.nap", "child_payload": {"seconds": 1.5}}
    payload |= {"spawning": {"pause": 0.3}, "resumed": {"linger": 5}}.get(when, {})
    parent = runqueue.submit(kind="test.fanout", payload=payload).run.id
    wait_until(lambda: _killed_at(when, parent), what=f"the kill point {when}", timeout=60)
    a.send(signal.SIGKILL)
    a.wait()
    b = start_worker(
        *ONE_INTERACTIVE, "--lease-seconds", "5", "--worker-id", "B", settings=PROJECT
    )
    wait_until(
        lambda: _status(parent) in TERMINAL_STATUSES or b.proc.poll() is not None,
        what="the parent to end",
        timeout=120,
    )
    assert b.proc.poll() is None, b.output()
    run = Run.objects.get(id=parent)
    assert (run.status, run.children_open) == ("succeeded", 0)
    assert [c[1] for c in run.result["children"]] == ["succeeded"] * 4
    assert EventLog.objects.filter(run_id=parent, type="run.resumed").count() == 1
    children = _children(parent)
    assert len(children) == 4  # a replayed spawn made no second child
    for child in children:
        ended = EventLog.objects.filter(run_id=child, type__in=["run.succeeded", "run.failed"])
        assert ended.count() == 1
    b.send(signal.SIGTERM)
    assert b.wait() == 0, b.output()
