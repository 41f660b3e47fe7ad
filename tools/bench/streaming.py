"""``python -m tools.bench.streaming [--quick]`` (and part ``streaming`` of
``python -m tools.bench``): token streaming with ``ctx.stream`` (issue 22).

100 turns (quick: 10), each a handler streaming 2,000 deltas (quick: 500)
as fast as it can, on an in-process pool of two slots. Each turn has two
live clients reading the run's event stream (``runqueue.stream``, the API
view's body): one from the start, one that joins after a random delay and
drops off and reconnects with its last event id; and one that comes after
the run ended and replays it. Figures per turn: the durable rows (the run's
events) and their bytes besides the text itself (``pg_column_size`` of the
event rows, less the text's UTF-8 bytes once), the commits per delta and WAL
bytes per delta on the server, and whether every client's assembled text
equals the run's result. Targets (issue 22): <= 20 rows and <= 10 KB per
turn besides the final text, every client's text equal.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from typing import Any

from tools.bench import common, measure, rq, rq_db

TARGET_ROWS = 20
TARGET_BYTES = 10_240


def _messages(chunk: bytes) -> list[dict[str, str]]:
    out = []
    for block in chunk.decode().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            if name:
                fields[name] = value.removeprefix(" ")
        if "event" in fields:
            out.append(fields)
    return out


def watch(run_id: Any, delay: float, drop_after: int | None, texts: list[str | None]) -> None:
    """A client: open the run's stream after ``delay`` s, assemble its text
    by offset (afresh at run.claimed), drop off every ``drop_after``
    messages and resume after the last id, until the terminal event."""
    from django.db import connection

    from runqueue.models import Run
    from runqueue.stream import open_stream

    time.sleep(delay)  # the client's arrival: a random point of the turn
    chars: list[str | None] = []
    last, ended = 0, False
    try:
        while not ended:
            stream = open_stream(Run.objects.get(id=run_id), last)
            if stream is None:
                break
            seen = 0
            try:
                for chunk in stream:
                    for message in _messages(chunk):
                        if "id" in message:
                            last = int(message["id"].partition(".")[0])  # "<id>.<stamp>"
                        event = message["event"]
                        if event == "run.claimed":
                            chars = []
                        elif event == "run.text":
                            data = json.loads(message["data"])
                            end = data["offset"] + len(data["text"])
                            chars.extend([None] * (end - len(chars)))
                            chars[data["offset"] : end] = data["text"]
                        elif event in ("run.succeeded", "run.failed", "run.cancelled"):
                            ended = True
                        seen += 1
                    if drop_after is not None and seen >= drop_after and not ended:
                        break
            finally:
                stream.close()
        texts.append(None if None in chars else "".join(chars))  # type: ignore[arg-type]
    finally:
        connection.close()


def turn_rows(run_id: Any) -> tuple[int, int, int]:
    """(events, run.text events, bytes of the events besides the text)."""
    with rq_db.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE type = 'run.text'), "
            "coalesce(sum(pg_column_size(e.*)), 0) "
            "- coalesce(sum(octet_length(e.data->>'text')) FILTER (WHERE type = 'run.text'), 0) "
            "FROM runqueue_run_event e WHERE run_id = %s",
            [run_id],
        )
        rows, texts, extra = cursor.fetchone()
    return int(rows), int(texts), int(extra)


def wal_lsn() -> int:
    with rq_db.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        return int(cursor.fetchone()[0])


def run(turns: int, deltas: int, url: str, log) -> dict[str, Any]:
    import runqueue

    rq_db.reset()
    rng = random.Random(22)
    stats = measure.Stats(url.rsplit("/", 1)[1])
    pool = rq._started_pool(["interactive=2"])
    rows, texts, extra, clients, equal = [], [], [], 0, 0
    commits = wal = 0
    started = time.perf_counter()
    try:
        for n in range(turns):
            commits_before, wal_before = stats.commits(), wal_lsn()
            run = runqueue.submit(kind="bench.stream", payload={"seed": n, "deltas": deltas}).run
            got: list[str | None] = []
            live = [
                threading.Thread(target=watch, args=(run.id, 0, None, got)),
                threading.Thread(
                    target=watch, args=(run.id, rng.uniform(0, 0.3), rng.choice([7, 50]), got)
                ),
            ]
            for thread in live:
                thread.start()
            for thread in live:
                thread.join(120)
            run.refresh_from_db()
            commits += stats.commits() - commits_before
            wal += wal_lsn() - wal_before
            watch(run.id, 0, None, got)  # after the end: the rows alone
            clients += len(got)
            equal += sum(text == (run.result or {}).get("text") for text in got)
            r, t, e = turn_rows(run.id)
            rows.append(r)
            texts.append(t)
            extra.append(e)
            if n % 10 == 0:
                log(f"streaming: turn {n + 1}/{turns}: {r} rows, {t} run.text, {e} B")
    finally:
        pool.stop()
        stats.conn.close()
        # The clients' hub LISTENs on the bench database for as long as the
        # process lives, and this thread's connection read the rows: both
        # closed, so a later part's count can see every backend exit.
        from django.db import connections

        from runqueue.stream import hub

        hub.reset()
        connections.close_all()  # this thread's, which counted the rows
    total = turns * deltas
    return {
        "turns": turns,
        "deltas_per_turn": deltas,
        "seconds": round(time.perf_counter() - started, 1),
        "rows_per_turn": {"max": max(rows), "mean": round(sum(rows) / turns, 1)},
        "text_rows_per_turn": {"max": max(texts), "mean": round(sum(texts) / turns, 1)},
        "bytes_besides_text_per_turn": {"max": max(extra), "mean": round(sum(extra) / turns)},
        # Server-wide counters over each turn: the clients' reads add their
        # own (read-only) transactions, so this is an upper bound.
        "commits_per_delta": round(commits / total, 3),
        "wal_bytes_per_delta": round(wal / total, 1),
        "clients": clients,
        "clients_equal": equal,
        "met": {
            "rows": max(rows) <= TARGET_ROWS,
            "bytes": max(extra) <= TARGET_BYTES,
            "clients": equal == clients,
        },
    }


def table(out: dict[str, Any]) -> str:
    met = out["met"]
    mark = {True: "MET", False: "NOT MET"}
    return "\n".join(
        [
            f"streaming: {out['turns']} turns x {out['deltas_per_turn']} deltas "
            f"({out['seconds']} s)",
            f"  durable rows per turn      max {out['rows_per_turn']['max']} "
            f"(run.text {out['text_rows_per_turn']['max']})  target <= {TARGET_ROWS}: "
            f"{mark[met['rows']]}",
            f"  bytes besides the text     max {out['bytes_besides_text_per_turn']['max']} B  "
            f"target <= {TARGET_BYTES}: {mark[met['bytes']]}",
            f"  commits per delta          {out['commits_per_delta']}",
            f"  WAL bytes per delta        {out['wal_bytes_per_delta']}",
            f"  clients with the result    {out['clients_equal']}/{out['clients']}: "
            f"{mark[met['clients']]}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.streaming", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--turns", type=int, help="turns (default: the profile's)")
    parser.add_argument("--deltas", type=int, help="deltas per turn (default: the profile's)")
    args = parser.parse_args(argv)
    profile = common.QUICK if args.quick else common.FULL
    turns = args.turns or profile.stream_turns
    deltas = args.deltas or profile.stream_deltas

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with common.scratch_database("streaming") as url:
        rq_db.setup_django(url)
        out = run(turns, deltas, url, log)
        from django.db import connections

        connections.close_all()
    print(table(out))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
