"""The "Rolling deploys" examples of docs/handlers.md, run as written: two versions
of a kind, a run pinned to the first finishing on it; a patch taken by new
runs and not by a run that passed its place; and the ``runqueue_replay``
command line against runs of the first version, its output as the docs
show it."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from django.db import connection

import runqueue
from runqueue import leases, registry, runtime, testing
from runqueue.models import Run, ToolInvocation
from runqueue.registry import Served
from tests.database.docs.docs_blocks import REPO, all_blocks, named
from tests.database.docs.docs_versions import CALLS, block

pytestmark = pytest.mark.django_db

V1 = Served.build({"support.turn": {1: ()}})
PAYLOAD = {"order": 7, "customer": 3}


@pytest.fixture(autouse=True)
def _calls() -> None:
    CALLS.clear()


def _tools(run_id: object) -> list[str]:
    return list(
        ToolInvocation.objects.filter(run_id=run_id).order_by("seq").values_list("tool", flat=True)
    )


def _recorded_steps(
    run: Run, steps: list[tuple[str, dict, dict]], served: Served | None = None
) -> None:
    """A worker of the older deploy (``served``) claimed the run, recorded
    ``steps`` and stopped (the run given back in the middle of its turn)."""
    lease = leases.claim_one("old", lease_seconds=60, served=served)
    assert lease is not None and lease.run_id == run.id
    for seq, (tool, args, result) in enumerate(steps):
        assert leases.record_tool_started(
            lease, seq=seq, tool=tool, idempotency="non_idempotent", arguments=args
        )
        assert leases.record_tool_outcome(lease, seq=seq, status="completed", result=result)
    assert leases.release(lease, "shutdown")


def test_the_versions_example_pins_a_run_to_the_version_that_started_it() -> None:
    assert registry.versions("support.turn") == [1, 2]
    started = runqueue.submit(kind="support.turn", payload=PAYLOAD).run
    _recorded_steps(started, [("lookup_order", {"id": 7}, {"order": 7, "total": 40})], V1)
    fresh = runqueue.submit(kind="support.turn", payload=PAYLOAD).run
    # This process has both versions: the pinned run finishes on version 1
    # (in the middle of its turn: no move), the fresh one starts on 2.
    for _ in range(2):
        lease = leases.claim_one("new", lease_seconds=60)
        assert lease is not None and testing.execute(lease) == "succeeded"
    assert Run.objects.get(id=started.id).handler_version == 1
    assert Run.objects.get(id=fresh.id).handler_version == 2
    assert _tools(started.id) == ["lookup_order", "lookup_customer"]
    assert _tools(fresh.id) == ["lookup_customer", "lookup_order"]
    assert (
        Run.objects.get(id=started.id).result
        == Run.objects.get(id=fresh.id).result
        == {
            "order": {"order": 7, "total": 40},
            "customer": {"customer": 3},
        }
    )


def test_the_patched_example_takes_the_patch_for_new_runs_only() -> None:
    old = runqueue.submit(kind="support.refund", payload={"order": 8}).run
    # Code without the patch recorded the lookup and the refund, then its
    # worker stopped before the run finished.
    _recorded_steps(
        old,
        [
            ("lookup_order", {"id": 8}, {"order": 8, "total": 40}),
            ("refund", {"order": 8}, {"refunded": 8}),
        ],
    )
    new = runqueue.submit(kind="support.refund", payload={"order": 7}).run
    for _ in range(2):
        lease = leases.claim_one("new", lease_seconds=60)
        assert lease is not None and testing.execute(lease) == "succeeded"
    assert _tools(new.id) == ["lookup_order", runtime.PATCH_TOOL, "fraud_check", "refund"]
    assert _tools(old.id) == ["lookup_order", "refund"]
    assert ("fraud_check", 8) not in CALLS and ("refund", 8) not in CALLS


def _docs_output() -> list[str]:
    """The docs' sample output, each line a pattern (its run id elided): the
    text block right after the command's."""
    command = named("replay-example")
    blocks = [b for b in all_blocks() if b.path == command.path]
    sample = blocks[blocks.index(command) + 1]
    assert sample.language == "text", sample.where
    return sample.code.splitlines()


@pytest.mark.usefixtures("transactional_db")
def test_the_replay_example_runs_as_written() -> None:
    """Three runs made by version 1; the docs' command, in a process of
    its own with the docs' handlers, replays them against version 2."""
    ids = []
    for _ in range(3):
        run = runqueue.submit(kind="support.turn", payload=PAYLOAD).run
        lease = leases.claim_one("old", lease_seconds=60, served=V1)
        assert lease is not None and testing.execute(lease) == "succeeded"
        ids.append(run.id)
    (line,) = block("replay-example", "sh").strip().splitlines()
    argv = shlex.split(line)
    assert argv[:2] == ["python", "manage.py"]
    db = connection.settings_dict
    database = {k: db[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT")}
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "RUNQUEUE_TEST_DATABASE": json.dumps(database),
        "RUNQUEUE_TEST_HANDLER_MODULES": json.dumps(["tests.database.docs.docs_versions"]),
    }
    done = subprocess.run(  # noqa: S603 - the docs' own example
        [sys.executable, *argv[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    first, example, _more, last = _docs_output()
    assert lines[0] == first.replace("20", "3")
    pattern = re.escape(example).replace(re.escape("6f1c2b8e-...-5d2e"), "(?P<id>[0-9a-f-]{36})")
    found = [re.fullmatch(pattern, row) for row in lines[1:-1]]
    assert all(found), lines
    assert {m["id"] for m in found if m} == {str(i) for i in ids}
    assert lines[-1] == last.replace("20", "3")
    assert "3 of 3 run(s) diverged" in done.stderr
