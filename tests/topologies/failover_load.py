"""Failovers under load on real clusters, run as a process of its own
(``python -m tests.topologies.failover_load <folder> <port A> <port B> <failovers>``),
its Django and its two ``runworker`` processes pointed at both nodes by a
libpq multi-host URL (``target_session_attrs=read-write``).

Replication is synchronous, so a submit that returned is on the standby.
Each round: submits keep arriving in a thread; the primary is killed
(``pg_ctl -m immediate``); the standby is promoted; a new standby is made
from it (``pg_basebackup -R``) on the dead primary's port, so the URL stays
right. Then: every acknowledged submit on the last primary, each run
finished once, each non-idempotent effect at most once (``uncertain``
instead of again), and how long after each promotion the first claim came.
Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path


def main(folder: str, port_a: int, port_b: int, failovers: int) -> dict[str, object]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.utils import Error as DjangoDatabaseError

    import runqueue
    from tests.handlers import LEDGER_DDL
    from tools.topology.clusters import Pair

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(LEDGER_DDL)
    connection.close()

    pair = Pair(Path(folder), (port_a, port_b))
    sql = pair.sql
    pair.synchronous(True)

    env = dict(os.environ) | {"PYTHONUNBUFFERED": "1"}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "runworker",
                "--slots",
                "interactive=2",
                "--worker-id",
                f"fo-{i}",
            ],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            stdout=(Path(folder) / f"worker-{i}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]

    acknowledged: list[str] = []
    errors: list[str] = []
    stop = threading.Event()

    def submitter() -> None:
        n = 0
        while not stop.is_set():
            try:
                run = runqueue.submit(
                    kind="test.tools",
                    payload={"idempotency": "non_idempotent"},
                    idempotency_key=f"fo-{n}",
                )
                acknowledged.append(str(run.run.id))
                n += 1
            except DjangoDatabaseError as exc:
                errors.append(repr(exc)[:200])
                connection.close()  # the primary went away: try the same key again
                stop.wait(0.2)
            stop.wait(0.05)  # about 20 submits a second
        connection.close()

    thread = threading.Thread(target=submitter)
    thread.start()
    resumed_after: list[float] = []
    try:
        for _ in range(failovers):
            deadline = time.monotonic() + 60
            while len(acknowledged) < 20 + 40 * len(resumed_after):
                if time.monotonic() > deadline:
                    raise TimeoutError("submits stopped arriving")
                time.sleep(0.05)
            promoted_at = pair.failover()
            new = pair.primary
            first = None
            deadline = time.monotonic() + 60
            while first is None and time.monotonic() < deadline:
                first = sql(
                    new,
                    "SELECT min(created_at) FROM runqueue_event_log"
                    " WHERE type = 'run.claimed' AND created_at > %s",
                    [promoted_at],
                )[0][0]
                time.sleep(0.05)
            if first is None:
                raise TimeoutError("no claim on the promoted primary")
            resumed_after.append((first - promoted_at).total_seconds())
            # A new standby on the dead primary's port, from the new primary.
            pair.rebuild_standby(synchronous=True)
        # Submits acknowledged once the last standby is synchronous again.
        wanted, deadline = len(acknowledged) + 10, time.monotonic() + 60
        while len(acknowledged) < wanted:
            if time.monotonic() > deadline:
                raise TimeoutError("submits stopped after the last failover")
            time.sleep(0.05)  # polling the submitter's count, with a deadline
    finally:
        stop.set()
        thread.join(60)

    primary = pair.primary
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        open_runs = sql(
            primary,
            "SELECT count(*) FROM runqueue_run WHERE status IN ('queued', 'running')"
            " AND kind = 'test.tools'",
        )[0][0]
        if open_runs == 0:
            break
        time.sleep(0.2)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()

    present = {
        str(r[0])
        for r in sql(
            primary, "SELECT id FROM runqueue_run WHERE id = ANY(%s::uuid[])", [acknowledged]
        )
    }
    terminal = sql(
        primary,
        "SELECT run_id, count(*) FROM runqueue_event_log"
        " WHERE type IN ('run.succeeded', 'run.failed', 'run.cancelled')"
        " GROUP BY run_id HAVING count(*) > 1",
    )
    repeated = sql(
        primary,
        "SELECT run_id, count(*) FROM runqueue_test_ledger WHERE what = 'effect'"
        " GROUP BY run_id HAVING count(*) > 1",
    )
    statuses = dict(
        sql(
            primary,
            "SELECT status, count(*) FROM runqueue_run WHERE kind = 'test.tools' GROUP BY status",
        )
    )
    uncertain = sql(
        primary, "SELECT count(*) FROM runqueue_tool_invocation WHERE status = 'uncertain'"
    )[0][0]
    return {
        "submitter_errors": len(errors),
        "acknowledged": len(acknowledged),
        "lost": len(set(acknowledged) - present),
        "duplicate_terminal": len(terminal),
        "repeated_effects": len(repeated),
        "statuses": statuses,
        "uncertain_tools": uncertain,
        "resumed_after_seconds": resumed_after,
        "open_runs": open_runs,
    }


if __name__ == "__main__":
    result = main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    print(json.dumps(result, default=str))
