"""The lost-claim failover on real clusters, run as a process of its own
(``python -m tests.topologies.failover_scenario <folder> <primary port> <standby port>``)
with Django pointed at both nodes by a libpq multi-host URL
(``target_session_attrs=read-write``), so every reconnect finds whichever
node is primary. Prints one JSON object of what each write returned and what
the promoted primary holds; ``tests/topologies/test_failover.py`` asserts on it.

The steps: run R queued and replicated; the standby stopped (replication
cut); worker Z claims R on the primary and records a non-idempotent tool as
started; the primary crashes (``pg_ctl -m immediate``); the standby starts
and is promoted, with R queued at the epoch before Z's claim; worker W
claims R there, at Z's epoch. Then each of Z's writes, and W's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: str, primary_port: int, standby_port: int) -> dict[str, object]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    import runqueue
    from runqueue import leases, testing
    from runqueue.models import EventLog, Run, ToolInvocation
    from tools.topology.clusters import Pair

    pair = Pair(Path(folder), (primary_port, standby_port))

    call_command("migrate", verbosity=0)
    run = runqueue.submit(kind="test.tools", max_attempts=5).run
    pair.wait_replayed()
    pair.standby.stop()  # replication cut: nothing below reaches it

    zombie = leases.claim_one("worker-Z", lease_seconds=60)
    assert zombie is not None and zombie.run_id == run.id
    z_started = leases.record_tool_started(
        zombie, seq=0, tool="charge_card", idempotency="non_idempotent", arguments={}
    )
    connection.close()
    pair.primary.stop("immediate")  # a crash: Z's claim never left the primary
    pair.standby.start()
    pair.standby.promote()

    owner = leases.claim_one("worker-W", lease_seconds=60)  # reconnects to the new primary
    assert owner is not None and owner.run_id == run.id
    result: dict[str, object] = {
        "same_epoch": owner.epoch == zombie.epoch,
        "tokens_differ": owner.token != zombie.token,
        "zombie_started_tool": z_started,
        "server_port": server_port(),
    }
    w_started = leases.record_tool_started(
        owner, seq=0, tool="charge_card", idempotency="non_idempotent", arguments={}
    )
    result["zombie"] = {
        "heartbeat": leases.heartbeat(zombie),
        "checkpoint": leases.checkpoint(zombie, {"by": "Z"}),
        "tool_outcome": leases.record_tool_outcome(
            zombie, seq=0, status="completed", result={"by": "Z"}
        ),
        "tool_started": leases.record_tool_started(
            zombie, seq=1, tool="send_email", idempotency="non_idempotent", arguments={}
        ),
        "event": leases.append_event(zombie, "agent.note", {"by": "Z"}),
        "succeed": testing.succeed(zombie, {"by": "Z"}),
    }
    result["owner"] = {
        "tool_started": w_started,
        "tool_outcome": leases.record_tool_outcome(
            owner, seq=0, status="completed", result={"by": "W"}
        ),
        "checkpoint": leases.checkpoint(owner, {"by": "W"}),
        "succeed": testing.succeed(owner, {"by": "W"}),
    }
    final = Run.objects.get(id=run.id)
    result["final"] = {
        "status": final.status,
        "result": final.result,
        "tools": list(
            ToolInvocation.objects.filter(run_id=run.id)
            .order_by("seq")
            .values_list("seq", "status", "result")
        ),
        "tool_tokens": [
            str(t)
            for t in ToolInvocation.objects.filter(run_id=run.id).values_list(
                "lease_token", flat=True
            )
        ],
        "owner_token": str(owner.token),
        "fenced_owners": sorted(
            {
                e["owner"]
                for e in EventLog.objects.filter(run_id=run.id, type="run.fenced").values_list(
                    "data", flat=True
                )
            }
        ),
        "notes": EventLog.objects.filter(run_id=run.id, type="agent.note").count(),
    }
    return result


def server_port() -> int:
    """The port of the node Django's connection reached."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        return cursor.fetchone()[0]


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), default=str))
