"""Handler versions: the registry, the claim that takes only the kinds and
versions a worker has, a run pinned to the version of its first claim, and
``migrate_from``'s move between turns (docs/decisions.md, "Versions and
rolling deploys"). Each "worker" here is a claim with the ``Served`` its
handlers would give; the handlers run in this process."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.db.models.functions import Now

import runqueue
from runqueue import leases, registry, testing
from runqueue.capacity import concurrency
from runqueue.errors import UnknownKind
from runqueue.leases.claim import statement_params
from runqueue.models import Checkpoint, ConcurrencyLimit, PriorityClass, Run, RunStatus
from runqueue.registry import Served
from runqueue.sql import queries
from tests.helpers import Worker

pytestmark = pytest.mark.django_db

TURNS = "versions.turns"
OTHER = "versions.other"

#: Workers of a rolling deploy, by what they have.
V1 = Served.build({TURNS: {1: ()}})
V2_ONLY = Served.build({TURNS: {2: ()}})
V2_MOVES = Served.build({TURNS: {2: (1,)}})
BOTH = Served.build({TURNS: {1: (), 2: (1,)}})
OTHER_ONLY = Served.build({OTHER: {1: ()}})


def _noop(n: int) -> dict:
    return {"n": n}


def _call(ctx: runqueue.RunContext, name: str) -> object:
    return ctx.invoke_tool(name, _noop, args={"n": 1}).value


@runqueue.handler(TURNS, version=1)
def turns_v1(ctx: runqueue.RunContext) -> object:
    """Two turns: ``a`` then the user; then ``b``."""
    if ctx.state is None:
        _call(ctx, "a")
        return ctx.ask_user("more?", state={"turn": 1})
    _call(ctx, "b")
    return {"version": 1, "input": ctx.input}


@runqueue.handler(TURNS, version=2, migrate_from=(1,))
def turns_v2(ctx: runqueue.RunContext) -> object:
    """Version 1 with its calls the other way round."""
    if ctx.state is None:
        _call(ctx, "b")
        return ctx.ask_user("more?", state={"turn": 1})
    _call(ctx, "a")
    return {"version": 2, "input": ctx.input}


@runqueue.handler(OTHER)
def other(ctx: runqueue.RunContext) -> object:
    return {"other": True}


@pytest.fixture(params=["plain", "capped"])
def claim_path(request: pytest.FixtureRequest) -> str:
    """Each test runs with the plain claim and with the capped walk (a
    limit on an unrelated key makes every claim take it)."""
    if request.param == "capped":
        ConcurrencyLimit.objects.create(
            key="nobody", priority_class=PriorityClass.INTERACTIVE, max_running=1
        )
    concurrency.invalidate()
    assert concurrency.caps_may_apply() == (request.param == "capped")
    yield request.param
    concurrency.invalidate()


def _claim(served: Served, owner: str = "w") -> leases.Lease | None:
    return leases.claim_one(owner, lease_seconds=60, served=served)


def _run(run_id: object) -> Run:
    return Run.objects.get(id=run_id)


# --- the registry ----------------------------------------------------------------


def test_a_kind_has_versions_and_its_newest_is_the_default() -> None:
    assert registry.versions(TURNS) == [1, 2]
    assert registry.newest(TURNS) == 2
    assert registry.lookup(TURNS) is turns_v2
    assert registry.lookup(TURNS, 1) is turns_v1
    with pytest.raises(UnknownKind, match="no handler registered for kind 'versions.turns' v"):
        registry.lookup(TURNS, 3)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"version": 0}, "version of kind 'x' must be an integer from 1 to 2147483647"),
        ({"version": True}, "version of kind 'x' must be an integer from 1 to 2147483647"),
        ({"version": "2"}, "version of kind 'x' must be an integer from 1 to 2147483647"),
        (
            {"version": 2, "migrate_from": (2,)},
            "migrate_from of kind 'x' version 2 names older versions (integers from 1 to 1), "
            "got 2",
        ),
        (
            {"version": 3, "migrate_from": 1},
            "migrate_from of kind 'x' is a list of versions, got 1",
        ),
    ],
)
def test_a_bad_version_is_refused_at_registration(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        registry.handler("x", **kwargs)
    assert str(excinfo.value) == error
    assert not registry.is_registered("x")


def test_one_version_has_one_handler() -> None:
    with pytest.raises(ValueError, match="kind 'versions.turns' version 1 is already handled by"):
        registry.handler(TURNS, version=1)(other)


def test_served_is_what_the_claim_asks_for_and_the_worker_row_shows() -> None:
    assert BOTH.params() == {
        "kinds": f'{{"{TURNS}"}}',
        "kind_newest": "{2}",
        "kind_versions": f'{{"{TURNS}:1","{TURNS}:2"}}',
        "kind_moves": f'{{"{TURNS}:1"}}',
        "kind_move_to": "{2}",
    }
    # What the claim's casts read back: the same values, quoting and all.
    odd = Served.build({'k "1"\\,{x}': {1: ()}, "plain": {1: (), 2: (1,)}})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT %(kinds)s::text[], %(kind_newest)s::int[], %(kind_versions)s::text[],"
            " %(kind_moves)s::text[], %(kind_move_to)s::int[]",
            odd.params(),
        )
        assert cursor.fetchone() == (
            list(odd.kinds),
            list(odd.newest),
            list(odd.versions),
            list(odd.moves),
            list(odd.move_to),
        )
    assert Served.build({}).params()["kinds"] == "{}"
    assert BOTH.row() == {TURNS: {"versions": [1, 2], "moves": {"1": 2}}}
    assert TURNS in registry.served().kinds
    # The newest version that names an older one takes its runs.
    three = Served.build({"k": {1: (), 2: (1,), 3: (1, 2)}})
    assert dict(zip(three.moves, three.move_to, strict=True)) == {"k:1": 3, "k:2": 3}


# --- the claim ---------------------------------------------------------------------


def test_a_worker_never_claims_a_kind_it_has_no_handler_for(claim_path: str) -> None:
    """An unknown kind waits queued for a worker that has it: no attempt
    used, no dead letter."""
    run = runqueue.submit(kind=OTHER).run
    assert _claim(V1) is None
    assert (_run(run.id).status, _run(run.id).attempts, _run(run.id).failure) == (
        RunStatus.QUEUED,
        0,
        None,
    )
    lease = _claim(OTHER_ONLY)
    assert lease is not None and lease.run_id == run.id
    assert testing.execute(lease) == "succeeded"


def test_a_claim_walks_past_runs_it_cannot_take(claim_path: str) -> None:
    """Older runs of a kind this worker lacks do not hide younger ones it has."""
    held = [runqueue.submit(kind=OTHER).run.id for _ in range(5)]
    mine = runqueue.submit(kind=TURNS).run.id
    got = leases.claim("w", limit=10, lease_seconds=60, served=V1)
    assert [lease.run_id for lease in got] == [mine]
    assert set(Run.objects.filter(id__in=held).values_list("status", flat=True)) == {"queued"}


def test_the_first_claim_pins_the_workers_newest_version(claim_path: str) -> None:
    run = runqueue.submit(kind=TURNS).run
    assert run.handler_version is None
    lease = _claim(BOTH)
    assert lease is not None and lease.run.handler_version == 2
    assert _run(run.id).handler_version == 2


def test_a_pinned_run_is_claimed_again_only_with_its_version(claim_path: str) -> None:
    """Pinned to 1 and given back (a worker stopping): a worker with only
    version 2 (and no migrate_from) leaves it; one with version 1 takes it."""
    run = runqueue.submit(kind=TURNS).run
    lease = _claim(V1)
    assert lease is not None and lease.run.handler_version == 1
    assert leases.release(lease, "shutdown")
    assert _claim(V2_ONLY) is None
    again = _claim(V1)
    assert again is not None and again.run_id == run.id and again.run.handler_version == 1


def _mid_turn(run_id: object) -> None:
    """Pinned to 1 with a step of its turn recorded, then given back (its
    worker stopped in the middle of the turn)."""
    lease = _claim(V1)
    assert lease is not None and lease.run_id == run_id
    assert leases.record_tool_started(
        lease, seq=0, tool="a", idempotency="idempotent", arguments={"n": 1}
    )
    assert leases.record_tool_outcome(lease, seq=0, status="completed", result={"n": 1})
    assert leases.release(lease, "shutdown")


def test_a_run_in_the_middle_of_a_turn_never_moves(claim_path: str) -> None:
    """Version 2 migrates from 1, but this run recorded a step of its
    current turn: version 2 would replay it in another order, so only a
    worker with version 1 takes it, and it finishes on version 1."""
    run = runqueue.submit(kind=TURNS).run
    _mid_turn(run.id)
    assert _claim(V2_MOVES) is None
    lease = _claim(BOTH)
    assert lease is not None and lease.run.handler_version == 1
    assert testing.execute(lease) == "waiting"  # replayed "a", asked the user
    assert _run(run.id).handler_version == 1


def test_a_run_between_turns_moves_to_the_version_that_migrates_from_its_own(
    claim_path: str,
) -> None:
    """Turn 1 on version 1 ends asking the user (a turn-end checkpoint);
    answered, the run is between turns: a worker with only version 2, which
    migrates from 1, takes it, and turn 2 runs version 2's code."""
    run = runqueue.submit(kind=TURNS, session_id="s-move").run
    lease = _claim(V1)
    assert lease is not None
    assert testing.execute(lease) == "waiting"
    checkpoint = Checkpoint.objects.get(run_id=run.id)
    assert (checkpoint.turn_end, checkpoint.tool_seq) == (True, 1)
    runqueue.deliver_input(run.id, {"answer": "yes"})
    assert _claim(V2_ONLY) is None  # no migrate_from: pinned to 1
    moved = _claim(V2_MOVES)
    assert moved is not None and moved.run.handler_version == 2
    assert testing.execute(moved) == "succeeded"
    done = _run(run.id)
    assert (done.handler_version, done.result) == (2, {"version": 2, "input": {"answer": "yes"}})


def test_a_mid_turn_checkpoint_is_no_turn_boundary(claim_path: str) -> None:
    """``ctx.checkpoint`` inside a turn does not let a newer version in."""
    run = runqueue.submit(kind=TURNS).run
    lease = _claim(V1)
    assert lease is not None
    assert leases.checkpoint(lease, {"halfway": True}, tool_seq=0)
    assert leases.release(lease, "shutdown")
    assert _claim(V2_MOVES) is None
    again = _claim(V1)
    assert again is not None and again.run_id == run.id


def test_a_run_that_never_recorded_anything_may_move(claim_path: str) -> None:
    """Pinned by a claim whose handler did nothing durable: nothing to
    replay, so a migrating version takes it from its start."""
    run = runqueue.submit(kind=TURNS).run
    lease = _claim(V1)
    assert lease is not None and leases.release(lease, "shutdown")
    moved = _claim(V2_MOVES)
    assert moved is not None and moved.run_id == run.id and moved.run.handler_version == 2


def test_a_worker_with_both_versions_moves_a_run_between_turns() -> None:
    run = runqueue.submit(kind=TURNS, session_id="s-both").run
    lease = _claim(V1)
    assert lease is not None and testing.execute(lease) == "waiting"
    runqueue.deliver_input(run.id, "go")
    moved = _claim(BOTH)
    assert moved is not None and moved.run.handler_version == 2


def test_the_claim_still_walks_the_claim_index() -> None:
    """EXPLAIN after ANALYZE: the kind and version test is a filter on the
    claim index's rows (the inlined runqueue_claim_version), never a scan of
    its own."""
    Run.objects.bulk_create(
        [
            Run(kind=(TURNS, OTHER)[i % 2], priority=(0, 10, 20)[i % 3], payload={})
            for i in range(3000)
        ]
    )
    spec = leases.claim_spec("w", [PriorityClass.INTERACTIVE], limit=10, served=V1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runqueue_run")
        cursor.execute("EXPLAIN (VERBOSE) " + queries()["claim"], statement_params((), spec))
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using runqueue_run_claim_idx" in plan, plan
    assert "InitPlan" in plan, plan
    assert "runqueue_claim_version" not in plan, plan  # inlined
    assert "runqueue_between_turns" in plan, plan  # only where a move is asked


def test_which_worker_takes_which_run_is_one_function() -> None:
    """runqueue_claim_version holds the rule: the plain claims filter and
    pin with it, the capped walk filters with it in its three reads, and
    the capped statements pin with it."""
    from runqueue.sql import functions

    assert functions()["runqueue_claim_capped"].count("runqueue_claim_version(") == 3
    for name in ("finish_and_claim", "finish_and_claim_capped", "claim", "claim_capped"):
        expected = 1 if name.endswith("_capped") else 2
        assert queries()[name].count("runqueue_claim_version(") == expected, name


def test_a_run_whose_handler_the_worker_lost_is_given_back_never_failed() -> None:
    """A claim made for a version this process does not have (its registry
    changed since): the runtime gives the run back, queued at once with its
    attempt returned, and writes no failure."""
    run = runqueue.submit(kind=TURNS).run
    lease = _claim(Served.build({TURNS: {9: ()}}))
    assert lease is not None and lease.run.handler_version == 9
    assert testing.execute(lease) == "given_back"
    after = _run(run.id)
    assert (after.status, after.attempts, after.failure) == (RunStatus.QUEUED, 0, None)
    assert after.events.filter(type="run.requeued", data__reason="unhandled").exists()


@pytest.mark.django_db(transaction=True)
def test_racing_workers_of_two_deploys_each_claim_a_run_once_on_their_own_version(
    claim_path: str,
) -> None:
    """Threads with their own connections claim at once: workers with only
    version 1, with only version 2 (no moves), and with version 2 that moves
    1. Every run is claimed once, pinned to its claimer's version; runs
    given back pinned to 1 (nothing recorded: between turns) are taken again
    once each, never by the worker that has only version 2."""
    runqueue.submit_many([runqueue.SubmitRequest(kind=TURNS)] * 60)
    claimers = {"v1-a": V1, "v1-b": V1, "v2-a": V2_ONLY, "v2-b": V2_ONLY}
    first = _race(claimers)
    assert sorted(r for got in first.values() for r, _ in got) == sorted(
        Run.objects.values_list("id", flat=True)
    )
    for name, got in first.items():
        assert {v for _, v in got} <= {1 if name.startswith("v1") else 2}, name
    pinned_to_1 = [r for name, got in first.items() if name.startswith("v1") for r, _ in got]
    assert pinned_to_1  # both deploys claimed
    Run.objects.filter(status=RunStatus.RUNNING).update(
        status=RunStatus.QUEUED,
        lease_token=None,
        lease_expires_at=None,
        lease_owner="",
        claim_event_id=None,  # a row holds its claim only while running (claim_held)
        claimed_at=None,
        claim_wait_ms=None,
    )
    Run.objects.filter(handler_version=2).update(status=RunStatus.SUCCEEDED, finished_at=Now())
    second = _race({"v1": V1, "v2-only": V2_ONLY, "mover-a": V2_MOVES, "mover-b": V2_MOVES})
    assert second["v2-only"] == []
    assert sorted(r for got in second.values() for r, _ in got) == sorted(pinned_to_1)
    assert {v for _, v in second["v1"]} <= {1}
    assert {v for _, v in second["mover-a"] + second["mover-b"]} <= {2}


def _race(claimers: dict[str, Served]) -> dict[str, list[tuple[object, int]]]:
    """Each claimer, in a thread of its own, claims until nothing is left for
    any: in rounds, every claimer's claim of a round at once (a claimer that
    ran ahead could otherwise take every run before another's first claim),
    until a round where none got a run."""
    barrier = threading.Barrier(len(claimers))
    empty: dict[str, bool] = {}

    def drain(name: str, served: Served) -> list[tuple[object, int]]:
        got: list[tuple[object, int]] = []
        while True:
            barrier.wait()
            batch = leases.claim(name, limit=3, lease_seconds=60, served=served)
            got.extend((lease.run_id, lease.run.handler_version) for lease in batch)
            empty[name] = not batch
            barrier.wait()
            if all(empty.values()):
                return got

    threads = {
        name: Worker(lambda n=name, s=served: drain(n, s), name=name)
        for name, served in claimers.items()
    }
    for thread in threads.values():
        thread.start()
    return {name: thread.outcome() for name, thread in threads.items()}
