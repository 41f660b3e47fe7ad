"""Reads from a replica (RUNQUEUE["READ_DATABASE"]) on a real primary and
streaming standby of the machine's PostgreSQL, with the standby lagging:
its replay paused, so what a read saw says which server served it
(tests/topologies/replica_reads.py runs the steps in a process of its own
whose Django has both). One scenario, its findings checked by concern."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.topology import clusters

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(
        not clusters.available(), reason="PostgreSQL 15's server binaries are not installed"
    ),
    # Never the suite's database: a PostgreSQL 15 pair of their own.
    pytest.mark.own_servers,
]


def _database(port: int) -> dict:
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "OPTIONS": {"connect_timeout": 2},
    }


@pytest.fixture(scope="module")
def seen() -> Iterator[dict]:
    """What the scenario's reads saw (one pair, made and dropped here)."""
    pair = clusters.Pair()
    try:
        pair.create()
        env = dict(os.environ) | {
            "DJANGO_SETTINGS_MODULE": "tests.topologies.replica_settings",
            "RUNQUEUE_TEST_DATABASE": json.dumps(_database(pair.primary.port)),
            "RUNQUEUE_TEST_REPLICA_DATABASE": json.dumps(_database(pair.standby.port)),
            "RUNQUEUE_TEST_SETTINGS": json.dumps({"API_KINDS": ["k", "test.echo"]}),
            "PYTHONUNBUFFERED": "1",
            # Never connected to: keeps the project's settings from
            # starting the embedded server.
            "DATABASE_URL": "postgres://unused@127.0.0.1:1/not_connected",
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.topologies.replica_reads",
                str(pair.folder),
                str(pair.primary.port),
                str(pair.standby.port),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        yield json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        pair.drop()


def test_a_caught_up_replica_serves_the_list_without_a_notice(seen) -> None:
    assert seen["caught_up"] == {"list_has_a": True, "notice": False, "header": False}


def test_the_console_lists_the_dashboard_metrics_and_api_reads_come_from_the_lagging_replica(
    seen,
) -> None:
    """Run A was cancelled, W finished, B, D and E submitted on the primary
    after the standby's replay paused: the replica's reads show none of it,
    and say how far behind they are."""
    replica = seen["replica"]
    assert replica["a_event_types"] == ["run.created"]  # no run.cancelled
    assert replica["session_active"] is not None  # A still active there
    assert replica["list_has"] == {"a": True, "b": False, "d": False}
    assert replica["dashboard_finished_hour"] == 0  # A cancelled, W succeeded: not there
    assert replica["metrics_queued"] == 1  # A, not B, D and E
    assert replica["list_notice"] and replica["dashboard_notice"]
    for header in ("events_header", "steps_header", "session_header", "metrics_header"):
        assert float(replica[header]) >= 0.5, (header, replica)
    assert replica["metrics_lag_gauge"]


def test_writes_the_worker_and_reads_of_ones_own_write_stay_on_the_primary(seen) -> None:
    """Submit and its Location read, the cancel, the worker's claim, fence
    and finish, and the new run's events all work on a run the replica has
    not seen; GET /runs/{id}/ reads the primary (A cancelled there)."""
    primary = seen["primary"]
    assert primary["cancel_status"] == 200
    assert primary["worker_outcome"] == "succeeded" and primary["w_status"] == "succeeded"
    assert primary["submit_status"] == 201
    assert (primary["location_status"], primary["location_run"]) == (200, "queued")
    assert primary["new_run_events"] == ["run.created"]  # the replica missed: the primary read
    assert seen["replica"]["a_status_on_primary"] == "cancelled"
    assert not seen["replica"]["a_run_header"]


def test_a_console_action_and_the_run_page_use_the_primary_and_the_list_after_it_too(
    seen,
) -> None:
    action = seen["action"]
    assert action["change_page"] == 200  # D is on the primary only
    assert action["d_status"] == "cancelled"
    # The staff member's own write is not replayed yet: the primary again.
    assert action["list_after_has_d"] and not action["list_after_notice"]
    assert action["still_lagging"]


def test_once_replayed_the_replica_shows_everything_and_no_notice(seen) -> None:
    resumed = seen["resumed"]
    assert resumed["list_has"] == {"b": True, "e": True, "w": True}
    assert not resumed["list_notice"] and resumed["events_header"] is None
    assert resumed["a_event_types"][-1] == "run.cancelled"
    assert resumed["dashboard_finished_hour"] == 3  # A, W and D
    assert resumed["metrics_queued"] == 2  # B and E


def test_past_the_max_lag_or_with_the_replica_down_reads_go_to_the_primary(seen) -> None:
    assert seen["too_far_behind"] == {
        "list_has_f": True,
        "list_notice": False,
        "metrics_lag_gauge": False,
    }
    assert seen["standby_down"] == {
        "list_status": 200,
        "list_has_g": True,
        "events_status": 200,
        "events_header": None,
        "metrics_status": 200,
    }
