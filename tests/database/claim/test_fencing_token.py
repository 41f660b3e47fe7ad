"""The fencing token: a claim a failover lost is made again with the same
epoch, and only the claim's random token tells the two owners apart.

An asynchronous standby promoted before the claim's WAL reached it has the
run queued at the epoch it had before the claim; the next claim there gives
the same epoch again. Simulated here on one server, without clusters:
worker Z claims, the run row is put back as the promoted standby has it
(queued, the epoch and attempt before Z's claim, Z's run.claimed event
gone), worker W claims it at Z's epoch; then every write Z can make writes
nothing (run.fenced aside) while W's all commit.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection

import runqueue
from runqueue import leases, testing
from runqueue.leases.outcomes import Succeeded
from runqueue.models import Checkpoint, EventLog, Run, RunStatus, ToolInvocation

pytestmark = pytest.mark.django_db(transaction=True)


def _lost_claim(run_id: object) -> None:
    """Put the run back as a standby that never saw the claim has it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runqueue_run SET status = 'queued', lease_epoch = lease_epoch - 1,"
            " attempts = attempts - 1, lease_owner = '', lease_token = NULL,"
            " lease_expires_at = NULL, heartbeat_at = NULL, started_at = NULL,"
            " claim_event_id = NULL, claimed_at = NULL, claim_wait_ms = NULL"
            " WHERE id = %s",
            [run_id],
        )


def _same_epoch_twice() -> tuple[Run, leases.Lease, leases.Lease]:
    """(run, Z's lease, W's lease): both at epoch 1, different tokens."""
    run = runqueue.submit(kind="agent.turn", session_id="s1", max_attempts=5).run
    zombie = leases.claim_one("worker-Z", lease_seconds=30)
    assert zombie is not None and zombie.epoch == 1 and zombie.token is not None
    _lost_claim(run.id)
    owner = leases.claim_one("worker-W", lease_seconds=30)
    assert owner is not None and owner.run_id == run.id
    assert owner.epoch == zombie.epoch == 1
    assert owner.token is not None and owner.token != zombie.token
    return run, zombie, owner


def _fresh(lease: leases.Lease) -> leases.Lease:
    """A copy of the lease that has not found out it is fenced: each write
    reaches the database, none is stopped by the lease's own flag."""
    fields = Run._meta.concrete_fields
    run = Run.from_db(
        "default", [f.attname for f in fields], [getattr(lease.run, f.attname) for f in fields]
    )
    return leases.Lease(run=run, owner=lease.owner, lease_seconds=lease.lease_seconds)


def _start_tool(lease: leases.Lease, seq: int = 0) -> bool:
    return leases.record_tool_started(
        lease, seq=seq, tool="charge_card", idempotency="non_idempotent", arguments={"cents": 500}
    )


#: Every write the zombie can make, each a fenced statement of its own.
ZOMBIE_WRITES: dict[str, Callable[[leases.Lease], bool]] = {
    "heartbeat": leases.heartbeat,
    "heartbeat_many": lambda lease: leases.heartbeat_many([lease]) == [],
    "checkpoint": lambda lease: leases.checkpoint(lease, {"by": "Z"}),
    "tool_started": lambda lease: _start_tool(lease, seq=7),
    "tool_outcome": lambda lease: leases.record_tool_outcome(
        lease, seq=0, status="completed", result={"by": "Z"}
    ),
    "event": lambda lease: leases.append_event(lease, "agent.note", {"by": "Z"}),
    "succeed": lambda lease: testing.succeed(lease, {"by": "Z"}),
    "finish_and_claim": lambda lease: (
        leases.finish_and_claim(
            [(lease, Succeeded.of({"by": "Z"}))],
            leases.claim_spec("worker-Z", leases.ALL_CLASSES, limit=0),
        )[0]
        == [True]
    ),
    "give_up": lambda lease: leases.give_up(lease, ValueError("flaky")),
    "wait_for_user": lambda lease: leases.wait_for_user(lease, {"ask": "?"}, state={"s": "Z"}),
    "release": lambda lease: leases.release(lease, "stopping"),
}


def _written(run_id: object) -> dict[str, object]:
    run = Run.objects.get(id=run_id)
    return {
        "run": (run.status, run.lease_epoch, run.lease_token, run.result, run.attempts),
        "events": list(
            EventLog.objects.filter(run_id=run_id)
            .exclude(type="run.fenced")
            .values_list("id", "type", "data")
        ),
        "checkpoints": list(Checkpoint.objects.filter(run_id=run_id).values_list("seq", "state")),
        "tools": list(
            ToolInvocation.objects.filter(run_id=run_id).values_list(
                "seq", "status", "result", "lease_token"
            )
        ),
    }


@pytest.mark.parametrize("path", list(ZOMBIE_WRITES))
def test_a_claim_made_again_at_the_same_epoch_fences_the_lost_owner(path: str) -> None:
    run, zombie, owner = _same_epoch_twice()
    assert _start_tool(owner)  # W's tool row, which Z's outcome must not touch
    before = _written(run.id)

    assert ZOMBIE_WRITES[path](_fresh(zombie)) is False

    assert _written(run.id) == before
    fenced = EventLog.objects.filter(run_id=run.id, type="run.fenced").values_list(
        "data", flat=True
    )
    assert [(d["owner"], d["token"]) for d in fenced] == [("worker-Z", str(zombie.token))]


def test_the_lost_owner_writes_nothing_and_the_new_owner_everything() -> None:
    """Z's heartbeat, checkpoint, tool record, event and finish write
    nothing; W's, made after each of them, all commit, and the audit tells
    the two apart by token."""
    run, zombie, owner = _same_epoch_twice()
    claimed = EventLog.objects.get(run_id=run.id, type="run.claimed")
    assert claimed.data["token"] == str(owner.token)
    assert claimed.data["owner"] == "worker-W"

    steps: list[tuple[Callable[[leases.Lease], bool], Callable[[leases.Lease], bool]]] = [
        (leases.heartbeat, leases.heartbeat),
        (lambda z: _start_tool(z), lambda w: _start_tool(w)),
        (
            lambda z: leases.record_tool_outcome(z, seq=0, status="completed", result={"by": "Z"}),
            lambda w: leases.record_tool_outcome(w, seq=0, status="completed", result={"by": "W"}),
        ),
        (
            lambda z: leases.checkpoint(z, {"by": "Z"}, tool_seq=1),
            lambda w: leases.checkpoint(w, {"by": "W"}, tool_seq=1),
        ),
        (
            lambda z: leases.append_event(z, "agent.note", {"by": "Z"}),
            lambda w: leases.append_event(w, "agent.note", {"by": "W"}),
        ),
        (lambda z: testing.succeed(z, {"by": "Z"}), lambda w: testing.succeed(w, {"by": "W"})),
    ]
    for zombie_write, owner_write in steps:
        assert zombie_write(_fresh(zombie)) is False
        assert owner_write(owner) is True

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"by": "W"}
    # No lease is held any more (the run is succeeded, and every fence
    # matches status running); the row keeps the last lease's token, which
    # its run.claimed event reads (migration 0024).
    assert (run.lease_token, run.lease_expires_at) == (owner.token, None)
    (tool,) = ToolInvocation.objects.filter(run_id=run.id)
    assert (tool.status, tool.result, tool.lease_token) == ("completed", {"by": "W"}, owner.token)
    assert list(Checkpoint.objects.filter(run_id=run.id).values_list("state", flat=True)) == [
        {"by": "W"}
    ]
    notes = EventLog.objects.filter(run_id=run.id, type="agent.note").values_list(
        "data", flat=True
    )
    assert list(notes) == [{"by": "W"}]
    fenced = EventLog.objects.filter(run_id=run.id, type="run.fenced")
    assert {e.data["token"] for e in fenced} == {str(zombie.token)}
    assert EventLog.objects.filter(run_id=run.id, type="run.succeeded").count() == 1


def test_every_transition_by_another_clears_the_token() -> None:
    """Sweep, a wait, an input's delivery and cancel leave
    no token a former owner could match; each claim writes a new one."""
    run = runqueue.submit(kind="agent.turn", session_id="s1", max_attempts=5).run
    tokens = []

    def token() -> object:
        return Run.objects.values_list("lease_token", flat=True).get(id=run.id)

    first = leases.claim_one("w", lease_seconds=0)
    assert first is not None and token() == first.token
    tokens.append(first.token)
    assert [row[1] for row in leases.sweep()] == [RunStatus.QUEUED]
    assert token() is None
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runqueue_run SET scheduled_for = now() WHERE id = %s", [run.id])
    second = leases.claim_one("w", lease_seconds=30)
    assert second is not None and second.token not in (None, *tokens)
    tokens.append(second.token)
    assert leases.wait_for_user(second, {"ask": "?"})
    assert token() is None
    delivered = runqueue.submit(kind="agent.turn", session_id="s1", payload={"answer": 1})
    assert delivered.run.id == run.id
    assert token() is None
    third = leases.claim_one("w", lease_seconds=30)
    assert third is not None and third.token not in (None, *tokens)
    leases.cancel(run.id, reason="test", actor="t")
    assert token() is None
    assert leases.heartbeat(_fresh(third)) is False
