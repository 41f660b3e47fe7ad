"""A multi-step Pydantic AI agent on real runworker processes: the first
worker is killed (SIGKILL) while its second model request is in flight,
after the first request and the lookup finished; another worker finishes
the run, sending neither finished request again nor running a tool twice."""

from __future__ import annotations

import json
import signal

import pytest

pytest.importorskip("pydantic_ai")

from django.db import connection  # noqa: E402

import runqueue  # noqa: E402
from runqueue.models import Run, ToolInvocation  # noqa: E402
from tests.helpers import wait_until  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"BACKOFF_BASE_SECONDS": 0, "BACKOFF_JITTER": 0}
SHORT_LEASE = ["--lease-seconds", "2", "--heartbeat-seconds", "0.5"]
SHORT_LEASE += ["--sweep-seconds", "0.5", "--poll-seconds", "0.5"]
MODULES = {"RUNQUEUE_TEST_HANDLER_MODULES": json.dumps(["tests.agents.worker_agent"])}


def _ledger(what: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT detail FROM runqueue_test_ledger WHERE what = %s ORDER BY id", [what]
        )
        return [row[0] for row in cursor.fetchall()]


def test_kill_9_at_a_step_boundary_replays_what_finished(start_worker) -> None:
    from tests.agents import worker_agent  # noqa: F401 - registers pai.worker here too

    run_id = runqueue.submit(kind="pai.worker").run.id
    a = start_worker(*SHORT_LEASE, "--worker-id", "A", settings=FAST, env=MODULES)
    wait_until(lambda: _ledger("model") == ["0", "1"], what="A to send its second request")
    a.send(signal.SIGKILL)
    a.wait()
    steps = ToolInvocation.objects.filter(run_id=run_id).order_by("seq")
    assert [(s.tool, s.status) for s in steps] == [
        ("model:m-worker", "completed"),
        ("lookup_order", "completed"),
        ("model:m-worker", "started"),
    ]
    b = start_worker(*SHORT_LEASE, "--worker-id", "B", settings=FAST, env=MODULES)
    wait_until(
        lambda: Run.objects.values_list("status", flat=True).get(id=run_id) == "succeeded",
        what="B to finish the run",
    )
    assert Run.objects.get(id=run_id).result == "done: refunded 7"
    # The first request and the lookup were replayed; only the request in
    # flight when A died was sent again.
    assert _ledger("model") == ["0", "1", "1", "2"]
    assert _ledger("tool") == ["lookup_order", "refund"]
    assert Run.objects.get(id=run_id).attempts == 2
    b.send(signal.SIGTERM)
    assert b.wait() == 0
