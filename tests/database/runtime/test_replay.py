"""``manage.py runqueue_replay``: finished runs replayed against the code as
it is now, writing nothing; per run "match", or "diverged at step k" with
the difference, and exit status 1 if any diverged (runqueue.history.replay)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

import runqueue
from runqueue import leases, registry, testing
from runqueue.history import replay
from runqueue.models import Checkpoint, EventLog, Run, ToolInvocation
from runqueue.registry import Served

pytestmark = pytest.mark.django_db

KIND = "replay.k"
CALLS: list[str] = []


def _tool(name: str) -> dict:
    CALLS.append(name)
    return {"tool": name}


def _call(ctx: runqueue.RunContext, name: str) -> object:
    return ctx.invoke_tool(name, _tool, args={"name": name}).value


@runqueue.handler(KIND, version=1)
def replay_v1(ctx: runqueue.RunContext) -> object:
    """``a``, then (payload ``fail``) a failure or ``b``; (payload ``ask``)
    a turn asking the user before ``b``, whose answer is in the result."""
    payload = ctx.payload or {}
    if ctx.state is None:
        _call(ctx, "a")
        if payload.get("fail"):
            raise runqueue.PermanentError("a bug after a")
        if payload.get("ask"):
            return ctx.ask_user("which?", state={"asked": True})
    _call(ctx, "b")
    return {"answer": ctx.input}


@runqueue.handler(KIND, version=2)
def replay_v2(ctx: runqueue.RunContext) -> object:
    """Version 1 with its calls the other way round."""
    _call(ctx, "b")
    _call(ctx, "a")
    return {"answer": ctx.input}


@runqueue.handler(KIND, version=3)
def replay_v3(ctx: runqueue.RunContext) -> object:
    """Version 1 with its bug fixed, a patch for a new step, and a result
    that says which version made it."""
    payload = ctx.payload or {}
    if ctx.state is None:
        _call(ctx, "a")
        if payload.get("ask"):
            return ctx.ask_user("which?", state={"asked": True})
    if ctx.patched("add-c"):
        _call(ctx, "c")
    else:
        _call(ctx, "b")
    return {"answer": ctx.input, "by": 3}


@runqueue.handler(KIND, version=4)
async def replay_v4(ctx: runqueue.runtime.AsyncRunContext) -> object:
    """Version 1, async."""
    payload = ctx.payload or {}
    if ctx.state is None:
        await ctx.invoke_tool("a", _tool, args={"name": "a"})
        if payload.get("ask"):
            return ctx.ask_user("which?", state={"asked": True})
    await ctx.invoke_tool("b", _tool, args={"name": "b"})
    return {"answer": ctx.input}


V1 = Served.build({KIND: {1: ()}})


def _recorded(payload: dict | None = None, answer: object = None) -> Run:
    """A finished run of version 1 (answered ``answer`` when it asks)."""
    run = runqueue.submit(kind=KIND, payload=payload or {}).run
    lease = leases.claim_one("w", lease_seconds=60, served=V1)
    assert lease is not None and lease.run_id == run.id
    became = testing.execute(lease)
    if became == "waiting":
        runqueue.deliver_input(run.id, answer)
        lease = leases.claim_one("w", lease_seconds=60, served=V1)
        assert lease is not None
        became = testing.execute(lease)
    assert became in ("succeeded", "failed"), became
    return Run.objects.get(id=run.id)


def _command(*args: str) -> tuple[str, int]:
    out = io.StringIO()
    try:
        call_command("runqueue_replay", "--kind", KIND, *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc.returncode
    return out.getvalue(), 0


def _rows() -> tuple[int, ...]:
    return (
        Run.objects.count(),
        ToolInvocation.objects.count(),
        EventLog.objects.count(),
        Checkpoint.objects.count(),
    )


@pytest.fixture(autouse=True)
def _calls() -> None:
    CALLS.clear()


def test_runs_replayed_on_their_own_code_match_and_nothing_is_written() -> None:
    runs = [_recorded({"n": i}) for i in range(3)]
    asked = _recorded({"ask": True}, answer="blue")
    CALLS.clear()
    before = _rows()
    out, code = _command("--last", "10", "--handler-version", "1")
    assert code == 0, out
    assert out.splitlines()[0] == f"Replaying 4 finished run(s) of {KIND} against version 1"
    for run in [*runs, asked]:
        assert f"{run.id} succeeded: match" in out
    assert out.splitlines()[-1] == "4 matched, 0 diverged"
    assert (_rows(), CALLS) == (before, [])


def test_reordered_calls_diverge_at_the_first_step_and_the_command_fails() -> None:
    run = _recorded()
    out, code = _command("--last", "1", "--handler-version", "2")
    assert code == 1
    assert (
        f'{run.id} succeeded: diverged at step 0: recorded a({{"name": "a"}}), '
        f'now b({{"name": "b"}})'
    ) in out
    assert out.splitlines()[-1] == "0 matched, 1 diverged"


def test_a_failed_run_matches_where_its_records_end() -> None:
    """Version 1 failed after ``a``; version 3, fixed, goes on past the
    run's records: a match (the replay stops where the records end)."""
    run = _recorded({"fail": True})
    assert run.status == "failed"
    assert replay.replay_run(run, 1).line() == (
        f"{run.id} failed: match (failed again: PermanentError)"
    )
    assert replay.replay_run(run, 3).line() == (
        f"{run.id} failed: match (its 1 recorded step(s) replayed)"
    )


def test_a_turn_resumes_with_the_recorded_input_and_a_changed_result_diverges() -> None:
    """The second turn gets the input the run was given; version 3's patch
    gets False where the run recorded ``b`` (no divergence there), and its
    result differs: diverged at its end."""
    run = _recorded({"ask": True}, answer="blue")
    assert run.result == {"answer": "blue"}
    assert replay.replay_run(run, 1).verdict == "match"
    assert replay.replay_run(run, 3).line() == (
        f'{run.id} succeeded: diverged at its end: returned {{"answer": "blue", "by": 3}}, '
        f'the run returned {{"answer": "blue"}}'
    )


def test_a_handler_that_stops_early_diverges_at_the_step_it_left_out() -> None:
    @runqueue.handler("replay.short")
    def short(ctx: runqueue.RunContext) -> object:
        return {"answer": None}

    run = _recorded()
    Run.objects.filter(id=run.id).update(kind="replay.short")
    run.refresh_from_db()
    assert replay.replay_run(run).line() == (
        f"{run.id} succeeded: diverged at step 0: the handler returned; the run recorded a next"
    )


def test_an_async_handler_replays_too(transactional_db) -> None:
    run = _recorded({"ask": True}, answer="red")
    assert replay.replay_run(run, 4).verdict == "match"
    assert CALLS == ["a", "b"]  # the recording's calls only


def test_the_replay_writes_nothing_even_if_the_handler_tries() -> None:
    """The handler's own database work is in a read-only transaction."""

    @runqueue.handler("replay.writes")
    def writes(ctx: runqueue.RunContext) -> object:
        Run.objects.filter(id=ctx.run.id).update(payload={"changed": True})
        return None

    run = _recorded()
    Run.objects.filter(id=run.id).update(kind="replay.writes")
    run.refresh_from_db()
    result = replay.replay_run(run)
    assert result.verdict == "diverged"
    assert "read-only transaction" in result.difference
    assert Run.objects.get(id=run.id).payload == {}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--kind", "nope", "--last", "1"], "no handler registered for kind 'nope'"),
        (["--kind", KIND, "--last", "1", "--handler-version", "9"], "kind 'replay.k' version 9"),
        (["--kind", KIND, "--last", "0"], "must be between 1 and 10,000, got 0"),
        (["--kind", KIND, "--last", "x"], "expected a whole number, got 'x'"),
    ],
)
def test_bad_input_is_a_clear_error(args: list[str], error: str) -> None:
    with pytest.raises(CommandError, match=error):
        call_command("runqueue_replay", *args, stdout=io.StringIO())
    assert registry.is_registered(KIND)
