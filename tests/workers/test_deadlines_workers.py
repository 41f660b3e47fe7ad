"""``max_duration`` in real ``runworker`` processes: a handler that runs
past it is cancelled as by the stop button (a sync one sees
``ctx.cancelled``, an async one's task is cancelled) and its run fails for
good with reason max_duration; one that ignores the cancel stops having
its lease renewed, and the sweeper takes the run from it."""

from __future__ import annotations

import signal

import pytest
from django.db import connection

import runqueue
from runqueue.errors import LEASE_EXPIRED, MAX_DURATION
from runqueue.models import EventLog, Run, RunStatus
from tests.helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
SHORT_LEASE = ["--lease-seconds", "2", "--heartbeat-seconds", "0.3", "--sweep-seconds", "0.3"]


def _ledger(run_id, what: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE run_id = %s AND what = %s",
            [str(run_id), what],
        )
        return [row[0] for row in cursor.fetchall()]


def _release(run_id) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runqueue_test_ledger (run_id, what) VALUES (%s, 'release')",
            [str(run_id)],
        )


@pytest.mark.parametrize("kind", ["test.cooperative", "test.async_cooperative"])
def test_a_handler_past_its_max_duration_is_cancelled_and_fails_for_good(
    start_worker, kind: str
) -> None:
    worker = start_worker(*SHORT_LEASE, "--worker-id", "D", settings=FAST)
    run_id = runqueue.submit(kind=kind, max_duration=0.5, max_attempts=3).run.id
    wait_until(
        lambda: Run.objects.get(id=run_id).status == RunStatus.FAILED,
        what="the run to fail at its max_duration",
    )
    run = Run.objects.get(id=run_id)
    assert run.failure["classification"] == MAX_DURATION
    assert run.attempts == 1  # not retried
    assert _ledger(run_id, "cancelled") == [MAX_DURATION]
    (failed,) = EventLog.objects.filter(run_id=run_id, type="run.failed").values_list(
        "data", flat=True
    )
    assert failed["classification"] == MAX_DURATION
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()


def test_a_handler_that_ignores_the_cancel_is_fenced_by_its_lease(start_worker) -> None:
    worker = start_worker(*SHORT_LEASE, "--worker-id", "F", settings=FAST)
    run_id = runqueue.submit(kind="test.overrun", max_duration=0.5, max_attempts=1).run.id
    wait_until(lambda: _ledger(run_id, "started"), what="the handler to start")
    # Its lease is no longer renewed: the sweeper dead-letters the run (its
    # last attempt) while the handler still works.
    wait_until(
        lambda: Run.objects.get(id=run_id).status == RunStatus.FAILED,
        what="the sweeper to take the run",
    )
    run = Run.objects.get(id=run_id)
    assert run.failure["classification"] == LEASE_EXPIRED
    assert not _ledger(run_id, "ended")
    # Let it go: it ends, its outcome's write is fenced, the run stays as swept.
    _release(run_id)
    wait_until(lambda: _ledger(run_id, "ended"), what="the handler to end")
    assert _ledger(run_id, "ended") == [MAX_DURATION]
    wait_until(
        lambda: EventLog.objects.filter(run_id=run_id, type="run.fenced").exists(),
        what="the late finish to be fenced",
    )
    assert Run.objects.get(id=run_id).failure["classification"] == LEASE_EXPIRED
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()


def test_a_kinds_max_duration_applies_and_a_quick_run_is_untouched(start_worker) -> None:
    # test.overrun's kind default is 600 s: released at once, it succeeds.
    worker = start_worker(*SHORT_LEASE, "--worker-id", "Q", settings=FAST)
    run_id = runqueue.submit(kind="test.overrun").run.id
    assert Run.objects.get(id=run_id).max_duration == 600.0
    _release(run_id)
    wait_until(
        lambda: Run.objects.get(id=run_id).status == RunStatus.SUCCEEDED,
        what="the run to succeed",
    )
    assert _ledger(run_id, "ended") == [""]
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
