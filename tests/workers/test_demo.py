"""The demo a newcomer starts: its handler survives a requeue, every start
reaches every state once a worker runs, and --seed repeats the mix."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import runqueue
from runqueue import leases, testing
from runqueue.models import Run, RunStatus
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db


def run_once(run_id) -> str:
    lease = leases.claim_one("w-demo")
    assert lease is not None and lease.run_id == run_id
    return testing.execute(lease)


def test_a_requeued_declined_turn_fails_on_the_card_again_not_on_tool_order() -> None:
    """Issue 13: the requeued run failed with 'tool call #1 was charge_card on
    an earlier attempt and is lookup_order now'."""
    run = runqueue.submit(
        kind="demo.agent_turn", payload={"scenario": "decline", "order_id": "A-7"}
    ).run
    assert run_once(run.id) == "failed"
    first = Run.objects.get(id=run.id).failure
    assert first["message"].startswith("card declined")

    leases.requeue(run.id, actor="staff:test")
    assert run_once(run.id) == "failed"
    again = Run.objects.get(id=run.id)
    assert again.failure["message"] == first["message"], again.failure
    # The recorded outcomes were replayed: nothing ran twice.
    tools = list(again.tool_invocations.order_by("seq").values_list("tool", "status"))
    assert tools == [("lookup_order", "completed"), ("charge_card", "failed")]


def test_an_answered_question_resumes_without_repeating_the_lookup() -> None:
    run = runqueue.submit(
        kind="demo.agent_turn", payload={"scenario": "ask"}, session_id="demo-s"
    ).run
    assert run_once(run.id) == "waiting"
    runqueue.submit(kind="demo.agent_turn", session_id="demo-s", payload={"answer": "yes"})
    assert run_once(run.id) == "succeeded"
    assert Run.objects.get(id=run.id).result["answer"] == {"answer": "yes"}


def signature(runs: list[Run]) -> list[tuple]:
    """What --seed decides: everything but ids, sessions and the start time."""
    base = runs[0].scheduled_for
    return [
        (r.kind, r.payload, r.principal, r.priority, r.max_attempts, r.scheduled_for - base)
        for r in runs
    ]


def demo(*args: str) -> list[Run]:
    before = set(Run.objects.values_list("id", flat=True))
    call_command("runqueue_demo", *args, stdout=StringIO())
    return list(Run.objects.exclude(id__in=before).order_by("created_at", "id"))


def test_seed_repeats_the_mix() -> None:
    first = demo("--seed", "11", "--runs", "15")
    again = demo("--seed", "11", "--runs", "15")
    other = demo("--seed", "12", "--runs", "15")
    assert len(first) == 6 + 15
    assert signature(first) == signature(again)
    assert signature(first) != signature(other)
    assert not {r.session_id for r in first if r.session_id} & {r.session_id for r in again}


@pytest.mark.slow
def test_every_demo_start_reaches_every_state(start_worker) -> None:
    demo("--seed", "3", "--runs", "4", "--spread-seconds", "1")
    worker = start_worker("--worker-id", "demo")

    def states() -> set[str]:
        found = set(Run.objects.values_list("status", flat=True).distinct())
        if Run.objects.uncertain().exists():
            found.add("uncertain")
        return found

    wanted = {
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.WAITING_FOR_USER,
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        "uncertain",
    }
    wait_until(lambda: wanted <= states(), timeout=60, what="a run in every state")
    assert worker.proc.poll() is None, worker.output()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runs", "-5"], "expected a whole number from 0 to 10000"),
        (["--runs", "9" * 5000], "expected a whole number from 0 to 10000"),
        (["--spread-seconds", "nan"], "must be from 0 to 86400 seconds"),
        (["--spread-seconds", "1e300"], "must be from 0 to 86400 seconds"),
        (["--seed", "x"], "invalid int value"),
    ],
)
def test_bad_demo_arguments_are_one_line_errors(args: list[str], message: str) -> None:
    from django.core.management import CommandError

    with pytest.raises(CommandError, match=message):
        call_command("runqueue_demo", *args, stdout=StringIO())
    assert not Run.objects.exists()
