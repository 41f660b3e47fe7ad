"""A real runworker process gives a paused run back at its handler's next
step (told by the NOTIFY ``pause:<id>``, its heartbeat far away), and runs
it again from its record once resumed."""

from __future__ import annotations

import signal

import runqueue
from runqueue.models import Run, RunEvent
from tests.handlers import ledger
from tests.helpers import wait_until


def _whats(run_id) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT what FROM runqueue_test_ledger WHERE run_id = %s ORDER BY id", [str(run_id)]
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_worker_gives_a_paused_run_back_and_runs_it_once_resumed(start_worker) -> None:
    w = start_worker("--worker-id", "P", "--lease-seconds", "600")
    run_id = runqueue.submit(kind="test.pausable").run.id
    wait_until(lambda: "step1" in _whats(run_id), what="the first step")
    runqueue.pause_run(run_id, actor="ops", reason="check the draft")
    ledger(run_id, "release")
    requeued = RunEvent.objects.filter(run_id=run_id, type="run.requeued")
    wait_until(requeued.exists, what="the run given back")
    assert requeued.get().data["reason"] == "paused"
    run = Run.objects.get(id=run_id)
    assert run.status == "queued" and run.attempts == 0 and run.paused_at is not None
    assert _whats(run_id) == ["step1", "release"]
    runqueue.resume_run(run_id, actor="ops")
    wait_until(
        lambda: Run.objects.get(id=run_id).status == "succeeded", what="the resumed run to finish"
    )
    assert _whats(run_id) == ["step1", "release", "step2"]
    w.send(signal.SIGTERM)
    assert w.wait() == 0, w.output()
