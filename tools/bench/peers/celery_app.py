"""The Celery app the benchmark's worker runs (``celery -A tools.bench.peers.celery_app``).

The task records its start in Redis (one pipelined round trip): the first
and last start, a count, and the start of a numbered pickup sample."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/14")
QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench")

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(BROKER)
    return _client


@app.task(name="bench.noop")
def noop(seq: int | None = None) -> None:
    now = time.time()
    pipe = client().pipeline(transaction=False)
    pipe.setnx("bench:first", now)
    pipe.set("bench:last", now)
    pipe.incr("bench:done")
    if seq is not None:
        pipe.hset("bench:started", str(seq), now)
    pipe.execute()
