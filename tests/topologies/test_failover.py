"""The fence on a real failover: two clusters of the machine's PostgreSQL
(a primary and an asynchronous streaming standby), the primary crashed and
the standby promoted after a claim whose WAL never reached it.

The scenario runs in a process of its own whose Django reaches the nodes
through a libpq multi-host URL with ``target_session_attrs=read-write``
(tests/topologies/failover_scenario.py): the reconnect after the crash finds the
promoted standby by itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.topology import clusters

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(
        not clusters.available(), reason="PostgreSQL 15's server binaries are not installed"
    ),
    # Never the suite's database: the pair is PostgreSQL 15 whichever server
    # the suite runs on, so CI runs these in one of its two suites only.
    pytest.mark.own_servers,
]


@pytest.fixture
def pair() -> Iterator[clusters.Pair]:
    made = clusters.Pair()
    try:
        yield made.create()
    finally:
        made.drop()


def _environment(pair: clusters.Pair, settings: dict | None = None) -> dict[str, str]:
    """The environment of a process whose Django reaches both nodes through
    a multi-host URL with ``target_session_attrs=read-write``."""
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1,127.0.0.1",
        "PORT": f"{pair.primary.port},{pair.standby.port}",
        "OPTIONS": {"target_session_attrs": "read-write", "connect_timeout": 2},
    }
    env = dict(os.environ) | {
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "RUNQUEUE_TEST_DATABASE": json.dumps(database),
        "RUNQUEUE_TEST_SETTINGS": json.dumps(settings or {}),
        "PYTHONUNBUFFERED": "1",
    }
    # Never connected to (DATABASES is the URL above), but set: without it
    # the project's settings would start the embedded server on import,
    # which the chaos soak may be restarting meanwhile in CI.
    env["DATABASE_URL"] = "postgres://unused@127.0.0.1:1/not_connected"
    return env


def _scenario(
    pair: clusters.Pair, module: str, *args: str, settings: dict | None = None
) -> tuple[dict, str]:
    """Run ``python -m <module> <folder> <primary port> <standby port> *args``
    with Django on both nodes (a multi-host URL, ``target_session_attrs=
    read-write``); (its JSON line, the worker logs it left)."""
    primary, standby = pair.primary.port, pair.standby.port
    env = _environment(pair, settings)
    done = subprocess.run(
        [sys.executable, "-m", module, str(pair.folder), str(primary), str(standby), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    logs = "".join(
        p.read_text(errors="replace")[-20000:] for p in pair.folder.glob("worker-*.log")
    )
    assert done.returncode == 0, done.stdout + done.stderr + logs
    return json.loads(done.stdout.strip().splitlines()[-1]), logs


def test_a_claim_lost_in_a_failover_fences_the_old_owner_on_the_promoted_standby(pair) -> None:
    seen, _logs = _scenario(pair, "tests.topologies.failover_scenario")
    standby = pair.standby.port

    # The promoted standby issued Z's epoch again, to W, with another token.
    assert seen["same_epoch"] and seen["tokens_differ"] and seen["zombie_started_tool"]
    assert seen["server_port"] == standby  # the multi-host URL found the new primary
    # Every write of the old owner wrote nothing; every write of the new one did.
    assert seen["zombie"] == dict.fromkeys(seen["zombie"], False)
    assert seen["owner"] == dict.fromkeys(seen["owner"], True)
    final = seen["final"]
    assert final["status"] == "succeeded" and final["result"] == {"by": "W"}
    assert final["tools"] == [[0, "completed", {"by": "W"}]]
    assert final["tool_tokens"] == [final["owner_token"]]
    assert final["fenced_owners"] == ["worker-Z"] and final["notes"] == 0


def test_workers_ride_through_failovers_under_load(pair) -> None:
    """Two runworker processes and a stream of submits; the primary killed
    and the standby promoted twice, synchronous replication: nothing
    acknowledged is lost, no run finishes twice, no non-idempotent effect
    happens twice, and the workers claim again on each new primary without
    a restart."""
    seen, logs = _scenario(
        pair,
        "tests.topologies.failover_load",
        "2",
        settings={
            "LEASE_SECONDS": 5,
            "HEARTBEAT_SECONDS": 1,
            "POLL_SECONDS": 0.5,
            "SWEEP_SECONDS": 1,
        },
    )
    assert seen["acknowledged"] >= 60
    assert seen["lost"] == 0, seen
    assert seen["duplicate_terminal"] == 0 and seen["repeated_effects"] == 0, seen
    assert seen["open_runs"] == 0, (seen, logs)
    assert len(seen["resumed_after_seconds"]) == 2
    # The first claim on each new primary: the submitter and the workers
    # both reconnect on their own (bounded by the test's deadline, measured
    # in docs/reliability.md rather than timed here).
    assert all(s >= 0 for s in seen["resumed_after_seconds"]), seen


def test_a_stream_resumed_across_a_failover_ends_with_the_new_primarys_events(pair) -> None:
    """Asynchronous replication, cut; events written on the primary alone
    and read by a stream client; the primary crashes, the standby is
    promoted and gives the lost events' ids to new events. The client
    reconnects with its last cursor: a reset, then the run from its first
    event, so it ends with exactly the new primary's list."""
    seen, _logs = _scenario(pair, "tests.topologies.failover_stream")
    assert seen["server_port"] == pair.standby.port  # the promoted standby served the resume
    assert seen["held_before_failover"]  # the client had read the lost timeline
    # What makes a plain id unsafe: the lost ids, the client's last among
    # them, were issued again; resuming after it would skip events.
    assert seen["lost_ids_reissued"] > 0 and seen["cursor_id_reissued"], seen
    assert seen["skipped_by_a_plain_id"] > 0, seen
    assert seen["resets"] == 1
    assert seen["client"] == seen["server"]  # no gap, no duplicate, nothing of the lost timeline
    assert seen["server"][-1][1] == "run.succeeded"


def test_a_worker_started_while_no_node_takes_writes_waits_and_registers(pair, tmp_path) -> None:
    """A worker whose process starts during a failover (the primary down,
    the standby not yet promoted) waits for a primary instead of exiting;
    once the standby is promoted it registers there and works."""
    env = _environment(pair)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=REPO, env=env, check=True, timeout=300)
    pair.wait_replayed()
    pair.primary.stop("immediate")  # the standby answers, read-only: no node takes writes
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*manage, "runworker", "--slots", "interactive=1", "--worker-id", "late"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while "Registering worker: connection lost" not in log.read_text(errors="replace"):
            assert worker.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)  # polling the worker's log, with a deadline
        pair.standby.promote()
        rows: list[tuple] = []
        while not rows:
            assert worker.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            rows = pair.sql(pair.standby, "SELECT pid FROM runqueue_worker WHERE id = 'late'")
            time.sleep(0.1)
        assert rows == [(worker.pid,)]
    finally:
        worker.terminate()
        worker.wait(60)
