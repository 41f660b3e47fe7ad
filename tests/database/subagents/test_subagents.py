"""Child runs, fan-in, signals, deadlines and cascading cancels, raced on
real connections: threads, each with its own, released together by a
barrier, many times over, in both orders."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid

import pytest
from django.db import connection
from django.db.models.functions import Now

import runqueue
from runqueue import leases, runtime, testing
from runqueue.errors import InvalidTransition, RunCancelled, RunNotFound
from runqueue.leases.failures import failure_record
from runqueue.leases.outcomes import Succeeded, Suspended
from runqueue.models import EventLog, PriorityClass, Run, RunStatus, Signal
from tests.helpers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_ledger")]

INTER, ASYNC = PriorityClass.INTERACTIVE, PriorityClass.ASYNC
DEADLINE = 30.0


def _parent(
    kind: str = "test.fanout", payload: dict | None = None, lease_seconds: float | None = None
) -> leases.Lease:
    """A submitted run, claimed (interactive: children go to async)."""
    runqueue.submit(kind=kind, payload=payload or {})
    lease = leases.claim_one("w1", [INTER], lease_seconds=lease_seconds)
    assert lease is not None
    return lease


def _spawn(ctx: runtime.RunContext, n: int) -> list[uuid.UUID]:
    return [ctx.spawn("test.echo", {"i": i}, priority=ASYNC) for i in range(n)]


def _reclaim(run_id: uuid.UUID) -> leases.Lease:
    """The lease expires, the sweeper requeues the run, another worker claims it."""
    deadline = time.monotonic() + DEADLINE
    while True:
        Run.objects.filter(id=run_id).update(lease_expires_at=Now() - dt.timedelta(seconds=1))
        if leases.sweep():
            break  # else its owner renewed it in between: again
        assert time.monotonic() < deadline, "the sweeper never took the run"
    Run.objects.filter(id=run_id).update(scheduled_for=None)
    # The stale owner may hold the row a moment (recording run.fenced): the
    # claim steps over a locked row, so it tries again.
    while (lease := leases.claim_one("w2", [INTER])) is None:
        assert time.monotonic() < deadline, "the run was never claimed again"
    assert lease.run_id == run_id
    return lease


def _resumes(run_id: uuid.UUID) -> int:
    return EventLog.objects.filter(run_id=run_id, type="run.resumed").count()


def _claim_children(n: int) -> list[leases.Lease]:
    claimed = leases.claim("children", [ASYNC], limit=n)
    assert len(claimed) == n
    return claimed


def _together(*fns) -> list:
    """Run each fn in a thread of its own, released at once; their results."""
    barrier = threading.Barrier(len(fns))

    def at_barrier(fn):
        def run():
            barrier.wait(10)
            return fn()

        return run

    workers = [Worker(at_barrier(fn), name=f"racer-{i}") for i, fn in enumerate(fns)]
    for w in workers:
        w.start()
    return [w.outcome() for w in workers]


# --- spawn -------------------------------------------------------------------


def test_a_handler_run_again_gets_the_same_children_and_a_stale_one_spawns_none() -> None:
    lease = _parent()
    ctx = runtime.build_context(lease)
    first = _spawn(ctx, 2)
    again = runtime.build_context(_reclaim(lease.run_id))
    assert _spawn(again, 2) == first  # replayed from the records, in order
    third = again.spawn("test.echo", {"i": 2}, priority=ASYNC)
    with pytest.raises(RunCancelled):
        ctx.spawn("test.echo", {"i": 9}, priority=ASYNC)  # the old lease is fenced
    children = list(Run.objects.filter(parent_id=lease.run_id).order_by("created_at"))
    assert [c.id for c in children] == [*first, third]
    assert [c.id for c in again.children()] == [*first, third]
    assert Run.objects.get(id=lease.run_id).children_open == 3
    assert all(c.tenant == lease.run.tenant and c.session_id is None for c in children)


def test_a_child_does_not_take_its_parents_session_slot() -> None:
    runqueue.submit(kind="test.fanout", session_id="s1")
    lease = leases.claim_one("w1", [INTER])
    ctx = runtime.build_context(lease)
    child = ctx.spawn("test.echo", priority=ASYNC)
    assert Run.objects.get(id=child).session_id is None
    with pytest.raises(runqueue.ActiveRunConflict):
        ctx.spawn("test.echo", session_id="s1", priority=ASYNC)  # the parent holds s1
    assert leases.write(lease, Suspended(reason="children", state={"s": 1}))
    # Waiting, the parent still holds its session: a submit there conflicts.
    with pytest.raises(runqueue.ActiveRunConflict):
        runqueue.submit(kind="test.echo", session_id="s1")
    assert Run.objects.filter(parent_id=lease.run_id).count() == 1


def test_an_interactive_runs_children_are_async_under_its_key_unless_told() -> None:
    # Below interactive a child keeps its parent's priority.
    runqueue.submit(kind="test.fanout", priority=PriorityClass.MAINTENANCE + 2)
    maintenance = runtime.build_context(leases.claim_one("w1", [PriorityClass.MAINTENANCE]))
    assert Run.objects.get(id=maintenance.spawn("test.echo")).priority == 22
    runqueue.submit(kind="test.fanout", priority=15)
    async_ctx = runtime.build_context(leases.claim_one("w1", [ASYNC]))
    assert Run.objects.get(id=async_ctx.spawn("test.echo")).priority == 15
    runqueue.submit(kind="test.fanout", tenant="acme", concurrency_key="acme:eu")
    ctx = runtime.build_context(leases.claim_one("w1", [INTER]))
    default = Run.objects.get(id=ctx.spawn("test.echo"))
    assert (default.priority, default.concurrency_key) == (ASYNC, "acme:eu")
    told = Run.objects.get(id=ctx.spawn("test.echo", priority=3, concurrency_key="k"))
    assert (told.priority, told.concurrency_key) == (3, "k")


def test_with_a_tenant_cap_children_run_together_and_the_tenants_turn_is_claimed(
    settings,
) -> None:
    """The project's default cap (one interactive run per tenant): the
    waiting parent's children are claimed together, and the tenant's next
    turn is claimed while they run."""
    settings.RUNQUEUE = {**settings.RUNQUEUE, "CONCURRENCY": {"interactive": 1}}
    runqueue.submit(kind="test.fanout", tenant="acme")
    lease = leases.claim_one("w1", [INTER])
    ctx = runtime.build_context(lease)
    [ctx.spawn("test.echo", {"i": i}) for i in range(2)]
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    assert len(leases.claim("w2", [INTER, ASYNC], limit=5)) == 2  # both children
    turn = runqueue.submit(kind="chat.turn", tenant="acme").run
    claimed = leases.claim_one("w3", [INTER])
    assert claimed is not None and claimed.run_id == turn.id


def test_a_child_follows_submits_rules() -> None:
    ctx = runtime.build_context(_parent())
    with pytest.raises(runqueue.UnknownKind):
        ctx.spawn("no.such.kind")
    with pytest.raises(runqueue.InvalidSubmission):
        ctx.spawn("test.echo", {"x": "\x00"})
    assert not Run.objects.filter(parent_id=ctx.run.id).exists()


@pytest.mark.parametrize("iteration", range(3))
def test_a_parent_reclaimed_while_it_spawns_creates_no_child_after(iteration: int) -> None:
    """The stale lease spawns in a loop while another worker reclaims the
    run: every child is one the stale handler was told about, and none is
    made once the reclaim committed."""
    lease = _parent()
    ctx = runtime.build_context(lease)
    made: list[uuid.UUID] = []
    started = threading.Event()
    # Each spawn renews the lease: a short one, so the sweeper may take it.
    lease.lease_seconds = 0.001

    def spawner() -> None:
        try:
            while True:
                made.append(ctx.spawn("test.echo", {"n": len(made)}, priority=ASYNC))
                started.set()
        except RunCancelled:
            return

    thread = Worker(spawner, name="spawner")
    thread.start()
    assert started.wait(DEADLINE)
    _reclaim(lease.run_id)
    at_reclaim = set(Run.objects.filter(parent_id=lease.run_id).values_list("id", flat=True))
    thread.outcome()
    after = set(Run.objects.filter(parent_id=lease.run_id).values_list("id", flat=True))
    assert after == at_reclaim == set(made)
    assert Run.objects.get(id=lease.run_id).children_open == len(made)


# --- fan-in --------------------------------------------------------------------


def test_waiting_for_children_already_finished_resumes_at_once() -> None:
    lease = _parent()
    ctx = runtime.build_context(lease)
    _spawn(ctx, 2)
    for child in _claim_children(2):
        assert testing.succeed(child, {"ok": True})
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    parent = Run.objects.get(id=lease.run_id)
    assert (parent.status, parent.children_open, _resumes(parent.id)) == ("queued", 0, 1)


def _finishers(children: list[leases.Lease]) -> list:
    """One way each for children to end: alone, with the next claim, dead
    letter, given up on the last attempt, cancelled."""
    spec = leases.claim_spec("f", [ASYNC], limit=0)
    ways = [
        lambda c: testing.succeed(c, {"i": 1}),
        lambda c: leases.finish_and_claim([(c, Succeeded.of({"i": 2}))], spec)[0][0],
        lambda c: testing.fail(
            c, failure_record(ValueError("x"), classification="permanent", attempt=1)
        ),
        lambda c: runqueue.cancel(c.run_id, reason="test", actor="t").status == "cancelled",
    ]
    count = len(ways)
    return [lambda c=c, w=ways[i % count]: w(c) for i, c in enumerate(children)]


@pytest.mark.parametrize("iteration", range(8))
def test_children_ending_at_once_resume_their_parent_exactly_once(iteration: int) -> None:
    n = 8
    lease = _parent()
    _spawn(runtime.build_context(lease), n)
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    assert Run.objects.get(id=lease.run_id).status == "waiting"
    assert all(_together(*_finishers(_claim_children(n))))
    parent = Run.objects.get(id=lease.run_id)
    assert (parent.status, parent.children_open, _resumes(parent.id)) == ("queued", 0, 1)


@pytest.mark.parametrize("iteration", range(15))
def test_the_wait_racing_the_last_child_resumes_exactly_once(iteration: int) -> None:
    lease = _parent()
    _spawn(runtime.build_context(lease), 1)
    (child,) = _claim_children(1)
    wait = Suspended(reason="children", state={"joined": True})
    _together(lambda: leases.write(lease, wait), lambda: testing.succeed(child, {"ok": 1}))
    parent = Run.objects.get(id=lease.run_id)
    assert (parent.status, parent.children_open, _resumes(parent.id)) == ("queued", 0, 1)


def test_on_resume_the_handler_gets_its_children_in_spawn_order() -> None:
    runqueue.submit(kind="test.fanout", payload={"n": 3, "child_payload": {}})
    parent = leases.claim_one("w1", [INTER])
    # The handler's children are async (child_priority): run everything in order.
    assert testing.execute(parent) == "waiting"
    ids = list(Run.objects.filter(parent_id=parent.run_id).values_list("id", flat=True))
    while (lease := leases.claim_one("w", [INTER, ASYNC])) is not None:
        testing.execute(lease)
    resumed = Run.objects.get(id=parent.run_id)
    assert resumed.status == "succeeded"
    spawned = [c[0] for c in resumed.result["children"]]
    records = runtime.build_context(parent).children()  # any context reads them
    assert spawned == [str(c.id) for c in records] and set(spawned) == {str(i) for i in ids}
    assert [c[1] for c in resumed.result["children"]] == ["succeeded"] * 3


def test_cancelling_a_child_alone_wakes_its_waiting_parent() -> None:
    lease = _parent()
    (child,) = _spawn(runtime.build_context(lease), 1)
    assert leases.write(lease, Suspended(reason="children", state={"joined": True}))
    runqueue.cancel(child, reason="not needed", actor="t", cascade=False)
    assert Run.objects.get(id=lease.run_id).status == "queued"
    resumed = leases.claim_one("w", [INTER])
    assert [c.status for c in runtime.build_context(resumed).children()] == ["cancelled"]


# --- signals -------------------------------------------------------------------


@pytest.mark.parametrize("signal_first", [True, False])
def test_a_signal_racing_the_waits_start_is_delivered_once(signal_first: bool) -> None:
    """Many interleavings: whichever commits first, the run resumes once,
    with the signal's data, and the mailbox is empty."""
    for i in range(25):
        lease = _parent("test.wait_signal")
        wait = Suspended(reason="signal", wait_name="go", state={"waited": True})
        send = lambda i=i, lease=lease: runqueue.signal(lease.run_id, "go", {"i": i})  # noqa: E731
        park = lambda lease=lease, wait=wait: leases.write(lease, wait)  # noqa: E731
        _together(send, park) if signal_first else _together(park, send)
        run = Run.objects.get(id=lease.run_id)
        assert (run.status, run.input, run.timed_out) == ("queued", {"i": i}, False)
        assert _resumes(run.id) == 1
        assert not Signal.objects.filter(run_id=run.id).exists()
        runqueue.cancel(run.id, reason="next", actor="t")


def test_a_signal_sent_before_the_first_claim_is_kept_for_the_wait() -> None:
    run = runqueue.submit(kind="test.wait_signal").run
    assert runqueue.signal(run.id, "other", 1) == "kept"
    assert runqueue.signal(run.id, "go", {"early": True}) == "kept"
    lease = leases.claim_one("w", [INTER])
    assert testing.execute(lease) == "waiting"  # resumed at once: the mailbox had it
    lease = leases.claim_one("w", [INTER])
    assert testing.execute(lease) == "succeeded"
    done = Run.objects.get(id=run.id)
    assert done.result == {"input": {"early": True}, "timed_out": False}
    assert list(Signal.objects.filter(run_id=run.id).values_list("name", flat=True)) == ["other"]


def test_signal_refuses_what_it_cannot_deliver() -> None:
    with pytest.raises(RunNotFound):
        runqueue.signal(uuid.uuid4(), "go")
    run = runqueue.submit(kind="test.echo").run
    runqueue.cancel(run.id, reason="x", actor="t")
    with pytest.raises(InvalidTransition):
        runqueue.signal(run.id, "go")
    with pytest.raises(runqueue.InvalidArgument, match="name must not be empty"):
        runqueue.signal(run.id, "")
    with pytest.raises(runqueue.InvalidArgument, match="run_id must be a UUID"):
        runqueue.signal("nope", "go")


# --- deadlines -----------------------------------------------------------------


def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, what
        leases.resume_due()
        time.sleep(0.05)


def test_a_signal_waits_deadline_resumes_it_timed_out() -> None:
    run = runqueue.submit(kind="test.wait_signal", payload={"timeout": 0.3}).run
    assert testing.execute(leases.claim_one("w", [INTER])) == "waiting"
    waiting = Run.objects.get(id=run.id)
    assert (waiting.status, waiting.wait_reason, waiting.wait_name) == ("waiting", "signal", "go")
    assert waiting.wait_until is not None and waiting.waiting_since is not None
    _until(lambda: Run.objects.get(id=run.id).status == "queued", "the deadline never fired")
    assert testing.execute(leases.claim_one("w", [INTER])) == "succeeded"
    assert Run.objects.get(id=run.id).result == {"input": None, "timed_out": True}


def test_ask_user_with_a_timeout_and_sleep_until() -> None:
    lease = _parent("test.ask")
    ctx = runtime.build_context(lease)
    assert leases.write(lease, runtime._returned(lease, ctx, ctx.ask_user("?", timeout=0.2)))
    asked = Run.objects.get(id=lease.run_id)
    assert (asked.status, asked.wait_reason) == ("waiting_for_user", "user")
    _until(lambda: Run.objects.get(id=asked.id).status == "queued", "ask_user never timed out")
    resumed = Run.objects.get(id=asked.id)
    assert (resumed.timed_out, resumed.input) == (True, None)
    runqueue.cancel(asked.id, reason="done", actor="t")

    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.3)
    run = runqueue.submit(kind="test.sleep", payload={"until": when.isoformat()}).run
    assert testing.execute(leases.claim_one("w", [INTER])) == "waiting"
    assert Run.objects.get(id=run.id).wait_reason == "timer"
    _until(lambda: Run.objects.get(id=run.id).status == "queued", "the timer never fired")
    assert testing.execute(leases.claim_one("w", [INTER])) == "succeeded"
    assert Run.objects.get(id=run.id).result == {"timed_out": False}


def test_a_signal_and_its_deadline_racing_resume_once() -> None:
    for i in range(20):
        lease = _parent("test.wait_signal")
        wait = Suspended(reason="signal", wait_name="go", timeout=0.05, state={"w": 1})
        assert leases.write(lease, wait)
        with connection.cursor() as cursor:  # the deadline is now
            cursor.execute("SELECT pg_sleep(0.06)")
        results = _together(
            lambda i=i, lease=lease: _signal_or_none(lease.run_id, i), leases.resume_due
        )
        run = Run.objects.get(id=lease.run_id)
        assert run.status == "queued" and _resumes(run.id) == 1
        if run.timed_out:
            assert run.input is None and results[0] in ("kept", None)
        else:
            assert run.input == {"i": i} and results[0] == "delivered"
        runqueue.cancel(run.id, reason="next", actor="t")


def _signal_or_none(run_id: uuid.UUID, i: int) -> str | None:
    try:
        return runqueue.signal(run_id, "go", {"i": i})
    except InvalidTransition:
        return None


# --- cancelling a tree ---------------------------------------------------------


def _tree_ids(root: uuid.UUID) -> set[uuid.UUID]:
    found, level = {root}, [root]
    while level:
        level = list(Run.objects.filter(parent_id__in=level).values_list("id", flat=True))
        found.update(level)
    return found


@pytest.mark.parametrize("iteration", range(6))
def test_a_cascade_racing_spawning_and_finishing_descendants(iteration: int) -> None:
    """A parent spawns in a loop, its children finish (counting in it, child
    then parent) while the cascade cancels parent then children: afterwards
    every run of the tree is terminal, and none was spawned after the
    cancel committed (deadlocks, if any, are retried on both sides)."""
    lease = _parent()
    ctx = runtime.build_context(lease)
    _spawn(ctx, 4)
    children = _claim_children(4)
    spawned_ok = threading.Event()

    def spawner() -> int:
        made = 0
        try:
            while True:
                ctx.spawn("test.echo", {"n": made}, priority=ASYNC)
                made += 1
                spawned_ok.set()
        except RunCancelled:
            return made

    def cancel() -> set[uuid.UUID]:
        spawned_ok.wait(DEADLINE)
        runqueue.cancel(lease.run_id, reason="stop", actor="t")
        return _tree_ids(lease.run_id)

    finishes = [lambda c=c: testing.succeed(c, {"done": True}) for c in children]
    results = _together(spawner, cancel, *finishes)
    at_cancel = results[1]
    after = _tree_ids(lease.run_id)
    assert after == at_cancel  # spawned_after_cancel == 0
    statuses = set(Run.objects.filter(id__in=after).values_list("status", flat=True))
    assert statuses <= {RunStatus.SUCCEEDED, RunStatus.CANCELLED}
    assert Run.objects.get(id=lease.run_id).status == "cancelled"


def test_a_cascade_reaches_grandchildren_below_a_finished_child() -> None:
    lease = _parent()
    (child_id,) = _spawn(runtime.build_context(lease), 1)
    (child,) = _claim_children(1)
    grandchild = runtime.build_context(child).spawn("test.echo", priority=INTER)
    assert testing.succeed(child, {"left": "its child running"})
    runqueue.cancel(lease.run_id, reason="stop", actor="t")
    assert Run.objects.get(id=grandchild).status == "cancelled"
    assert Run.objects.get(id=child_id).status == "succeeded"
    event = EventLog.objects.get(run_id=grandchild, type="run.cancelled")
    assert event.data["cascade_from"] == str(lease.run_id)
    lone = runqueue.submit(kind="test.fanout").run
    assert runqueue.cancel(lone.id, reason="x", actor="t", cascade=False).status == "cancelled"


def test_an_async_handler_spawns_waits_and_reads_its_children() -> None:
    run = runqueue.submit(kind="test.async_fanout").run
    assert testing.execute(leases.claim_one("w", [INTER])) == "waiting"
    while (lease := leases.claim_one("w", [INTER, ASYNC])) is not None and lease.run_id != run.id:
        testing.execute(lease)
    # The children ran; the parent resumed, and now waits for a signal.
    assert lease is not None and testing.execute(lease) == "waiting"
    assert runqueue.signal(run.id, "go", {"ok": True}) == "delivered"
    assert testing.execute(leases.claim_one("w", [INTER])) == "succeeded"
    done = Run.objects.get(id=run.id)
    assert done.result == {"children": ["succeeded", "succeeded"], "input": {"ok": True}}


def test_an_operators_requeue_of_a_dead_lettered_child_opens_it_again() -> None:
    lease = _parent()
    _spawn(runtime.build_context(lease), 2)
    first, second = _claim_children(2)
    assert testing.fail(first, failure_record(ValueError("x"), classification="p", attempt=1))
    assert Run.objects.get(id=lease.run_id).children_open == 1
    runqueue.leases.requeue(first.run_id, actor="op")
    assert Run.objects.get(id=lease.run_id).children_open == 2
    assert leases.write(lease, Suspended(reason="children", state={"j": 1}))
    assert testing.succeed(second, {})
    assert Run.objects.get(id=lease.run_id).status == "waiting"
    again = _claim_children(1)[0]
    assert testing.succeed(again, {})
    parent = Run.objects.get(id=lease.run_id)
    assert (parent.status, parent.children_open, _resumes(parent.id)) == ("queued", 0, 1)
