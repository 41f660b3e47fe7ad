"""A stream resumed across a real failover that lost WAL, run as a process
of its own (``python -m tests.topologies.failover_stream <folder> <primary port>
<standby port>``) with Django pointed at both nodes by a libpq multi-host
URL (``target_session_attrs=read-write``). Prints one JSON object;
``tests/topologies/test_failover.py`` asserts on it.

The steps: run R claimed and a few of its events written and replicated
(asynchronous replication); the standby stopped (replication cut); more
events on the primary, past a block of the event id sequence (PostgreSQL
logs a sequence 32 values ahead, so only a new block's WAL, lost with the
primary, lets the promoted standby issue the same ids again); a client
reads R's stream through the API's SSE endpoint up to the last of them;
the primary crashes; the standby is promoted; the worker, whose claim had
replicated, writes new events there (the lost ids again, other events)
and finishes R. The client reconnects with its last ``id:`` as
``Last-Event-ID`` and applies what comes as a client must (``stream.reset``:
drop what it holds).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: Events written on the primary after the cut: more than the 32 ids a
#: sequence logs ahead, so the promoted standby reissues some of them.
LOST_EVENTS = 40
#: Events the worker writes on the promoted standby: enough to pass the
#: client's last id, so a resume "after that id" would skip some of them.
NEW_EVENTS = 45


def main(folder: str, primary_port: int, standby_port: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    import runqueue
    from runqueue import leases, runtime, testing
    from runqueue.models import EventLog
    from runqueue.stream import sse
    from tests.api_helpers import make_caller
    from tests.topologies.failover_scenario import server_port
    from tools.topology.clusters import Pair

    pair = Pair(Path(folder), (primary_port, standby_port))
    call_command("migrate", verbosity=0)
    caller = make_caller("watcher", "acme")
    run = runqueue.submit(kind="test.stream", tenant="acme").run
    lease = leases.claim_one("worker-A", lease_seconds=120)
    assert lease is not None and lease.run_id == run.id
    ctx = runtime.build_context(lease)
    for n in range(3):
        assert ctx.emit("progress", {"timeline": "shared", "n": n})
    shared = set(EventLog.objects.filter(run_id=run.id).values_list("id", flat=True))
    pair.wait_replayed()
    pair.standby.stop()  # replication cut: nothing below reaches it
    for n in range(LOST_EVENTS):
        assert ctx.emit("progress", {"timeline": "lost", "n": n})
    lost = _as_streamed(EventLog.objects.filter(run_id=run.id).order_by("id"))

    url = f"/api/runs/{run.id}/stream/"
    client: list[list[Any]] = []  # what the client holds: [id, type, data]
    resets = 0

    def apply(message: str) -> str | None:
        """Apply one SSE message as a client does; its cursor, if any."""
        nonlocal resets
        lines = dict(line.split(": ", 1) for line in message.split("\n") if ": " in line)
        if lines.get("event") == sse.RESET:
            client.clear()
            resets += 1
            return None
        if "id" not in lines:
            return None
        body = json.loads(lines["data"])
        client.append([sse.parse_cursor(lines["id"])[0], lines["event"], body["data"]])
        return lines["id"]

    def read(headers: dict[str, str], until: int | None) -> str | None:
        """Read the stream (until the event id ``until``, or its end); the
        last cursor seen."""
        headers = caller.headers(Host="localhost", **headers)
        response = Client().get(url, headers=headers, secure=True)
        assert response.status_code == 200, response.status_code
        last, buffer = None, ""
        try:
            for chunk in response.streaming_content:
                buffer += chunk.decode()
                while "\n\n" in buffer:
                    message, buffer = buffer.split("\n\n", 1)
                    cursor = apply(message)
                    last = cursor or last
                    if until is not None and cursor and sse.parse_cursor(cursor)[0] == until:
                        return last
        finally:
            response.close()
        return last

    # The live run's stream on the old primary, up to the last event it holds.
    cursor = read({}, until=lost[-1][0])
    assert cursor is not None
    before_failover = [list(row) for row in client]

    connection.close()
    pair.primary.stop("immediate")  # a crash: the events after the cut never left it
    pair.standby.start()
    pair.standby.promote()

    # The worker rides through: its claim replicated, so its lease holds there.
    for n in range(NEW_EVENTS):
        assert ctx.emit("progress", {"timeline": "new", "n": n})
    assert testing.succeed(lease, {"ok": True})
    server = [
        list(row) for row in _as_streamed(EventLog.objects.filter(run_id=run.id).order_by("id"))
    ]
    cursor_id = sse.parse_cursor(cursor)[0]
    read({"Last-Event-ID": cursor}, until=None)
    lost_ids = {row[0] for row in lost} - shared
    return {
        "server_port": server_port(),
        "held_before_failover": before_failover == [list(row) for row in lost],
        "lost_ids_reissued": len(lost_ids & {row[0] for row in server}),
        "cursor_id_reissued": any(row[0] == cursor_id for row in server),
        "skipped_by_a_plain_id": sum(
            1 for row in server if row[0] <= cursor_id and row not in before_failover
        ),
        "resets": resets,
        "client": client,
        "server": server,
    }


def _as_streamed(log: Any) -> list[tuple[int, str, Any]]:
    """The events as an API token's client reads them: (id, type, data),
    the data without what is for operators (a claim's token and owner)."""
    from runqueue.events import event_body

    return [(e.id, e.type, event_body(e)["data"]) for e in log]


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), default=str))
