"""``python -m tools.bench.peers.turns SYSTEM URL CONCURRENCY``: one peer's async
worker in a process of its own, for ``tools.bench.async_turns``'s 1,000 turns.

Each job awaits ``asyncio.sleep(payload seconds)`` (the fake model call).
The worker runs until SIGTERM and prints ``ready`` once it listens for new
jobs, so the bench can queue the turns into an idle worker as it does for
runqueue's ``runworker``.

- ``procrastinate``: ``run_worker_async(concurrency=CONCURRENCY,
  listen_notify=True)`` on the ``turns`` queue; its default connection pool
  (psycopg_pool, ``min_size`` 4 = ``max_size``).
- ``pgqueuer``: ``QueueManager.run(batch_size=10, max_concurrent_tasks=
  CONCURRENCY)`` on one asyncpg connection (how PgQueuer's worker is built).

The module also holds what the bench runs against each peer's tables (its
statements, :data:`PEERS`), so the worker and its measurement stay together.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta

#: PgQueuer's default batch; its concurrency cap must be at least twice it.
PGQUEUER_BATCH = 10


def pgqueuer_batch(concurrency: int) -> int:
    """The default batch, smaller only where the cap would refuse it."""
    return max(1, min(PGQUEUER_BATCH, concurrency // 2))


@dataclass(frozen=True, slots=True)
class Peer:
    """What the bench runs against a peer's own tables."""

    #: ``n`` finished jobs: the drain is over.
    done: str
    #: Seconds from the first start / the last start to the last finish, as
    #: the peer's tables record them (the server's clock, like runqueue's).
    timing: str
    #: How the worker was configured, for the table.
    shape: str


PEERS: dict[str, Peer] = {
    # procrastinate_events rows are written by triggers on the job's status
    # change, in the transaction that fetches / finishes it.
    "procrastinate": Peer(
        done="SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
        timing="""
            SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                                      - min(at) FILTER (WHERE type = 'started')),
                   extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                                      - max(at) FILTER (WHERE type = 'started'))
              FROM procrastinate_events
        """,
        shape="run_worker_async(concurrency={n})",
    ),
    # pgqueuer_log gets 'picked' in the dequeue statement and 'successful'
    # when the worker's status buffer is flushed (the job is deleted then).
    "pgqueuer": Peer(
        done="SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
        timing="""
            SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful')
                                      - min(created) FILTER (WHERE status = 'picked')),
                   extract(epoch FROM max(created) FILTER (WHERE status = 'successful')
                                      - max(created) FILTER (WHERE status = 'picked'))
              FROM pgqueuer_log
        """,
        shape="QueueManager.run(batch_size={batch}, max_concurrent_tasks={n})",
    ),
}


def enqueue(system: str, conn, n: int, seconds: float) -> None:
    """Queue ``n`` turns in one transaction of ``conn`` (an autocommit psycopg
    connection the bench counts), through the peer's own enqueue statement."""
    payload = json.dumps({"seconds": seconds})
    if system == "procrastinate":
        # What ``batch_defer_async`` sends (procrastinate's ``defer_jobs`` query).
        conn.execute(
            "SELECT cardinality(procrastinate_defer_jobs_v1(ARRAY("
            " SELECT ROW('turns', 'turn', 0, NULL, NULL, %s::jsonb, NULL)"
            "::procrastinate_job_to_defer_v1 FROM generate_series(1, %s))))",
            [payload, n],
        )
    elif system == "pgqueuer":
        from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
        from pgqueuer.queries import SyncQueries

        SyncQueries(SyncPsycopgDriver(conn)).enqueue(["turn"] * n, [payload.encode()] * n, [0] * n)
    else:
        raise ValueError(f"unknown peer {system!r}")


def _ready() -> None:
    print("ready", flush=True)


async def _procrastinate(url: str, concurrency: int) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="turn", queue="turns")
    async def turn(seconds: float = 2.0) -> None:
        await asyncio.sleep(seconds)

    async with app.open_async():
        worker = asyncio.create_task(
            app.run_worker_async(
                queues=["turns"],
                concurrency=concurrency,
                listen_notify=True,
                install_signal_handlers=True,
            )
        )
        # Registered (procrastinate_workers) and listening.
        while not worker.done():
            row = await app.connector.execute_query_one_async(
                "SELECT count(*) AS n FROM procrastinate_workers"
            )
            if row["n"]:
                break
            await asyncio.sleep(0.05)
        if not worker.done():
            _ready()
        await worker


async def _pgqueuer(url: str, concurrency: int) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("turn")
    async def turn(job) -> None:
        await asyncio.sleep(json.loads(job.payload)["seconds"])

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    worker = asyncio.create_task(
        qm.run(
            dequeue_timeout=timedelta(seconds=30),
            batch_size=pgqueuer_batch(concurrency),
            max_concurrent_tasks=concurrency,
        )
    )
    while not conn._listeners and not worker.done():  # LISTEN issued
        await asyncio.sleep(0.01)
    if not worker.done():
        _ready()
    await worker
    await conn.close()


def main(argv: list[str]) -> int:
    system, url, concurrency = argv[0], argv[1], int(argv[2])
    run = {"procrastinate": _procrastinate, "pgqueuer": _pgqueuer}[system]
    asyncio.run(run(url, concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
