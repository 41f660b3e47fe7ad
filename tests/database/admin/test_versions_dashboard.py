"""What an operator sees of kinds and versions: each worker's row says
which kinds and versions it claims, the dashboard counts the runs of each
kind and version and names the live workers that claim them, and says
"no live worker has this kind" (or this version) for runs that wait for
one (docs/decisions.md, "Versions and rolling deploys")."""

from __future__ import annotations

import pytest

import runqueue
from runqueue import leases, registry
from runqueue.models import PriorityClass, Run, RunStatus, Worker
from runqueue.reads import versions, waiting
from runqueue.worker.pool import Pool, PoolConfig
from runqueue.worker.spec import SlotSpec
from tests.database.admin.test_admin import DASHBOARD, login
from tests.database.factories import RunFactory
from tests.database.runtime.test_versions import TURNS

pytestmark = pytest.mark.django_db

SLOTS = {"interactive,async,maintenance": 2}


def _worker(worker_id: str, kinds: dict) -> Worker:
    return Worker.objects.create(id=worker_id, hostname="h", pid=1, slots=SLOTS, kinds=kinds)


def _pinned(version: int | None, status: str = RunStatus.QUEUED, kind: str = TURNS) -> Run:
    return RunFactory(kind=kind, handler_version=version, status=status)


def test_a_worker_registers_the_kinds_and_versions_it_claims() -> None:
    pool = Pool(PoolConfig(slots=(SlotSpec.parse("interactive=1"),), burst=True))
    pool._register()
    row = Worker.objects.get(id=pool.config.worker_id).kinds
    assert row == registry.served().row()
    assert row[TURNS] == {"versions": [1, 2], "moves": {"1": 2}}


def test_the_dashboard_counts_runs_per_kind_and_version_and_names_who_claims_them() -> None:
    _worker("w-old", {TURNS: {"versions": [1], "moves": {}}})
    _worker("w-new", {TURNS: {"versions": [2], "moves": {"1": 2}}})
    _pinned(None)
    _pinned(1)
    _pinned(1, RunStatus.WAITING_FOR_USER)
    _pinned(2)
    _pinned(2)
    RunFactory(
        kind=TURNS,
        handler_version=1,
        status=RunStatus.RUNNING,
        lease_owner="w-old/x",
        lease_expires_at="2100-01-01T00:00:00Z",
    )
    _pinned(7)  # pinned to a version no live worker has
    _pinned(None, kind="gone.kind")  # a kind no live worker has
    rows = {(kv.kind, kv.version): kv for kv in versions.table()}
    v1 = rows[(TURNS, 1)]
    assert (v1.queued, v1.running, v1.waiting) == (1, 1, 1)
    assert (v1.workers, v1.movers, v1.words) == (["w-old"], ["w-new (to v2)"], "")
    assert (rows[(TURNS, 2)].queued, rows[(TURNS, 2)].workers) == (2, ["w-new"])
    assert rows[(TURNS, None)].workers == ["w-new", "w-old"]
    assert rows[(TURNS, 7)].words == "no live worker has version 7, which these runs are pinned to"
    assert rows[("gone.kind", None)].words == "no live worker has this kind"

    html = login("ann", "view_run").get(DASHBOARD).content.decode()
    table = html[html.index('id="rq-kind-versions"') :]
    table = table[: table.index("</table>")]
    assert table.count('class="rq-kind-version rq-unserved"') == 2
    assert "<strong>no live worker has this kind</strong>" in table
    assert "w-new (to v2)" in table
    workers = html[html.index('id="rq-workers"') :]
    assert f"{TURNS} v2 (1 to 2)" in workers
    pinned = Run.objects.get(handler_version=7)
    page = login("bo", "view_run").get(f"/admin/runqueue/run/{pinned.id}/change/")
    text = page.content.decode()
    assert "Handler version" in text and ">7<" in text.replace(" ", "")
    assert "No live worker has version 7 of kind versions.turns" in text


def test_once_the_old_version_has_no_run_its_row_says_so() -> None:
    """The operator's signal that the old worker may stop: no run is
    pinned to its version (its row counts none; the new worker claims every
    other run)."""
    _worker("w-old", {TURNS: {"versions": [1], "moves": {}}})
    _worker("w-new", {TURNS: {"versions": [1, 2], "moves": {"1": 2}}})
    _pinned(2)
    rows = {(kv.kind, kv.version): kv for kv in versions.table()}
    assert rows[(TURNS, 1)].active == 0
    assert rows[(TURNS, 1)].workers == ["w-new", "w-old"]


def test_a_run_pinned_to_a_version_only_a_mover_has_waits_only_in_the_middle_of_a_turn() -> None:
    """A live worker moves version 1's runs to 2 between turns: a run pinned
    to 1 with nothing recorded is not held; one with a step of its turn is,
    and the words say why."""
    _worker("w-new", {TURNS: {"versions": [2], "moves": {"1": 2}}})
    mid = runqueue.submit(kind=TURNS).run
    lease = leases.claim_one("w", lease_seconds=60, served=registry.Served.build({TURNS: {1: ()}}))
    assert lease is not None and lease.run_id == mid.id
    assert leases.record_tool_started(
        lease, seq=0, tool="a", idempotency="idempotent", arguments={}
    )
    assert leases.release(lease, "shutdown")
    _pinned(1)  # nothing recorded: between turns
    (cause,) = waiting.unhandled()
    assert (cause.cls, cause.reason, cause.subject, cause.waiting) == (
        PriorityClass.INTERACTIVE,
        waiting.NO_HANDLER,
        f"{TURNS} v1",
        1,
    )
    assert "w-new (to v2) takes those between turns" in cause.detail
    assert versions.why(Run.objects.get(id=mid.id)) == (
        f"No live worker has version 1 of kind {TURNS}, which the run is pinned to; "
        "w-new (to v2) takes it once it is between turns."
    )


def test_with_no_live_worker_the_classes_cause_speaks_alone() -> None:
    _pinned(None, kind="gone.kind")
    assert waiting.unhandled() == []
    assert {c.reason for c in waiting.causes()} == {waiting.NO_WORKER}


def test_counts_over_the_cap_are_a_sample_scaled_to_the_status_total(monkeypatch) -> None:
    """At most versions.CAP runs per status are read (in claim order for
    queued runs); above it the sample is scaled to the total given (the
    dashboard's depth), or read as a floor without one."""
    monkeypatch.setattr(versions, "CAP", 3)
    for _ in range(4):
        _pinned(1)
    for _ in range(4):
        _pinned(2)
    _pinned(1, RunStatus.WAITING_FOR_USER)
    floor = {(kv.kind, kv.version): kv for kv in versions.table([])}
    assert sum(kv.queued for kv in floor.values()) == 4  # CAP + 1 read
    assert floor[(TURNS, 1)].waiting == 1  # under the cap: exact
    scaled = {(kv.kind, kv.version): kv for kv in versions.table([], {"queued": 8})}
    assert sum(kv.queued for kv in scaled.values()) == 8
