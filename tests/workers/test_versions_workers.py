"""A rolling deploy with real workers: two runworker processes, an older
deploy's (``versions.k`` version 1 only, no ``versions.j``) and a newer
one's (``versions.k`` versions 1 and 2, where 2 makes its tool calls in the
other order and migrates from 1 between turns; ``versions.j``), under a
stream of submits. No run is dead-lettered for a kind its worker lacks, no
pinned run fails the replay check, and every run finishes
(docs/decisions.md, "Versions and rolling deploys")."""

from __future__ import annotations

import json
import signal
import threading

import pytest
from django.db import connection

import runqueue
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation, Worker
from runqueue.reads import versions
from tests.handlers import ledger
from tests.helpers import wait_until
from tests.workers.test_runworker import ledger_rows
from tests.workers.versions_new import J, K

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OLD = {"RUNQUEUE_TEST_HANDLER_MODULES": json.dumps(["tests.workers.versions_old"])}
NEW = {"RUNQUEUE_TEST_HANDLER_MODULES": json.dumps(["tests.workers.versions_new"])}
ARGS = ["--slots", "interactive=4", "--poll-seconds", "0.5", "--grace-seconds", "2"]


def _statuses(ids: list) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in Run.objects.filter(id__in=ids).values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


class Load(threading.Thread):
    """Submits runs of both kinds until stopped: the deploy happens under it."""

    def __init__(self) -> None:
        super().__init__(name="load", daemon=True)
        self.stop = threading.Event()
        self.ids: dict[str, list] = {K: [], J: []}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stop.wait(0.02):
                kind = (K, K, J)[n % 3]
                self.ids[kind].append(runqueue.submit(kind=kind, payload={"n": n}).run.id)
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
        finally:
            connection.close()


def _deploy(start_worker, old, load: Load) -> object:
    """Start the new worker beside the old one, under load; stop the old
    one. The new worker."""
    new = start_worker(*ARGS, "--worker-id", "new", env=NEW)
    wait_until(lambda: Worker.objects.filter(id="new").exists(), what="the new worker")
    kinds = {w.id: w.kinds for w in Worker.objects.filter(id__in=["old", "new"])}
    assert kinds["old"][K] == {"versions": [1], "moves": {}} and J not in kinds["old"]
    assert kinds["new"][K] == {"versions": [1, 2], "moves": {"1": 2}} and J in kinds["new"]
    wait_until(lambda: len(load.ids[J]) >= 20, what="the load to submit runs")
    # The old deploy stops: its held runs are given back, pinned to 1.
    old.send(signal.SIGTERM)
    assert old.wait(60) == 0, old.output()
    wait_until(lambda: len(load.ids[K]) >= 40, what="more runs after the old worker stopped")
    return new


def test_a_rolling_deploy_of_two_versions_under_load(start_worker) -> None:
    # The older deploy alone: it pins runs of K to version 1; three of them
    # stop between their two calls (step "a" recorded: the middle of a turn).
    old = start_worker(*ARGS, "--worker-id", "old", env=OLD)
    held = [runqueue.submit(kind=K, payload={"n": -i, "hold": True}).run.id for i in range(3)]
    wait_until(
        lambda: all(ledger_rows(run_id, "holding") for run_id in held),
        what="the old worker to hold three runs in the middle of their turn",
    )
    # The newer deploy starts beside it, and runs keep coming.
    load = Load()
    load.start()
    try:
        new = _deploy(start_worker, old, load)
    finally:
        load.stop.set()
        load.join(30)
    assert load.error is None, load.error

    # The new worker takes the held runs on version 1, the version they are
    # pinned to: version 2 would replay their step "a" as "b" and fail.
    wait_until(
        lambda: all(len(ledger_rows(run_id, "holding")) == 2 for run_id in held),
        what="the new worker to resume the held runs",
    )
    for run_id in held:
        ledger(run_id, "release")
    everything = held + load.ids[K] + load.ids[J]
    wait_until(
        lambda: _statuses(everything).get(RunStatus.SUCCEEDED) == len(everything),
        what="every run to finish",
        timeout=120,
    )

    assert not Run.objects.filter(status=RunStatus.FAILED).exists()
    # No worker claimed a run it had no handler for (the runtime would have
    # given it back: run.requeued, reason unhandled).
    assert not EventLog.objects.filter(type="run.requeued", data__reason="unhandled").exists()
    runs = {r.id: r for r in Run.objects.filter(id__in=everything)}
    for run_id in held:
        run = runs[run_id]
        assert (run.handler_version, run.result["version"]) == (1, 1)
        assert run.result["owner"].startswith("new/")
        # Step "a" ran once, in the old worker; the new one replayed it.
        assert [
            t for (t,) in ToolInvocation.objects.filter(run_id=run_id).values_list("tool")
        ] == [
            "a",
            "b",
        ]
        assert len(ledger_rows(run_id, "call")) == 2
    for run_id in load.ids[J]:
        assert runs[run_id].result["owner"].startswith("new/")  # never the old worker
    for run_id in load.ids[K]:
        run = runs[run_id]
        # Each run ran the version it was pinned to, start to end.
        assert run.handler_version == run.result["version"], run.result
        expected = 1 if run.result["owner"].startswith("old/") else 2
        assert run.handler_version == expected, run.result
    # Once no run is pinned to version 1, its row says so: the old worker
    # could have stopped (here it has).
    rows = {(kv.kind, kv.version): kv for kv in versions.table()}
    assert rows[(K, 1)].active == 0 and rows[(K, 1)].workers == ["new"]
    new.send(signal.SIGTERM)
    assert new.wait(60) == 0, new.output()
