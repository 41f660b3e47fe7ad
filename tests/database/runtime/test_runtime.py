"""The handler runtime in process: results, failures, tools, recovery."""

from __future__ import annotations

import pytest

import runqueue
from runqueue import Idempotency, leases, testing
from runqueue.models import Run, ToolInvocation
from tests.helpers import claimed, event_types, expire_lease

pytestmark = pytest.mark.django_db

CALLS: list[tuple] = []


@runqueue.handler("rt.tools")
def _tools(ctx: runqueue.RunContext):
    out = []
    for name, idem in (("lookup", Idempotency.IDEMPOTENT), ("charge", Idempotency.NON_IDEMPOTENT)):
        outcome = ctx.invoke_tool(name, _tool, args={"name": name}, idempotency=idem)
        out.append([name, outcome.status, outcome.value, outcome.replayed])
        if ctx.payload.get("stop_after") == name:
            raise _Crash
    return out


class _Crash(BaseException):  # noqa: N818 - not an error: a process death
    """Stands in for a worker dying mid-run: the runtime records nothing after it."""


def _tool(name: str, idempotency_key: str) -> dict:
    CALLS.append((name, idempotency_key))
    return {"tool": name}


def test_handler_result_is_the_run_result() -> None:
    sub = runqueue.submit(kind="test.echo", payload={"x": 1})
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=sub.run.id).result == {"echo": {"x": 1}}


@pytest.mark.parametrize(
    ("error", "status", "classification", "outcome"),
    [
        ("permanent", "failed", "permanent", "failed"),
        ("value", "failed", "permanent", "failed"),
        ("transient", "queued", None, "requeued"),
    ],
)
def test_exceptions_are_classified(error, status, classification, outcome, fast_retry) -> None:
    sub = runqueue.submit(kind="test.fail", payload={"error": error})
    assert testing.execute(claimed(lease_seconds=30)) == outcome
    run = Run.objects.get(id=sub.run.id)
    assert run.status == status
    if classification:
        assert run.failure["classification"] == classification
        assert "Traceback" in run.failure["traceback"]


def test_configured_transient_exceptions(settings, fast_retry) -> None:
    settings.RUNQUEUE = {
        "TRANSIENT_EXCEPTIONS": ["builtins.ValueError"],
        "BACKOFF_BASE_SECONDS": 0,
    }
    sub = runqueue.submit(kind="test.fail", payload={"error": "value"}, max_attempts=1)
    # The last attempt: a transient error dead-letters it, saying so.
    assert testing.execute(claimed(lease_seconds=30)) == "failed"
    assert Run.objects.get(id=sub.run.id).failure["classification"] == "transient"


def test_recovery_replays_completed_tools_and_marks_the_started_one_uncertain(fast_retry) -> None:
    CALLS.clear()
    sub = runqueue.submit(kind="rt.tools", payload={"stop_after": "lookup"})
    first = claimed(lease_seconds=30)
    # The first attempt dies after the lookup, with the charge not yet started.
    with pytest.raises(_Crash):
        testing.execute(first)
    # Then, pretend the charge had been recorded as started when it died.
    leases.record_tool_started(
        first,
        seq=1,
        tool="charge",
        idempotency=Idempotency.NON_IDEMPOTENT,
        arguments={"name": "charge"},
    )
    expire_lease(sub.run.id)
    leases.sweep()
    Run.objects.filter(id=sub.run.id).update(payload={})
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    result = Run.objects.get(id=sub.run.id).result
    assert result == [
        ["lookup", "completed", {"tool": "lookup"}, True],
        ["charge", "uncertain", None, False],
    ]
    assert CALLS == [("lookup", f"{sub.run.id}:0")]  # neither tool ran again
    assert ToolInvocation.objects.get(run_id=sub.run.id, seq=1).status == "uncertain"
    assert "tool.uncertain" in event_types(sub.run.id)


def test_idempotent_tool_left_started_runs_again_with_the_same_key(fast_retry) -> None:
    CALLS.clear()
    sub = runqueue.submit(kind="rt.tools")
    first = claimed(lease_seconds=30)
    leases.record_tool_started(
        first,
        seq=0,
        tool="lookup",
        idempotency=Idempotency.IDEMPOTENT,
        arguments={"name": "lookup"},
    )
    expire_lease(sub.run.id)
    leases.sweep()
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert CALLS == [("lookup", f"{sub.run.id}:0"), ("charge", f"{sub.run.id}:1")]
    assert ToolInvocation.objects.get(run_id=sub.run.id, seq=0).status == "completed"


def test_a_fenced_worker_never_calls_the_tool() -> None:
    CALLS.clear()
    sub = runqueue.submit(kind="rt.tools")
    lease = claimed(lease_seconds=30)
    runqueue.cancel(sub.run.id, reason="stop", actor="test")
    assert testing.execute(lease) == "fenced"
    assert CALLS == []
    assert not ToolInvocation.objects.filter(run_id=sub.run.id).exists()
    assert event_types(sub.run.id, epoch=1) == ["run.claimed", "run.fenced"]


def test_uncertain_outcome_raised_by_a_tool() -> None:
    def timeout() -> None:
        raise runqueue.UncertainOutcome("timed out after sending")

    @runqueue.handler("rt.timeout")
    def _handler(ctx):
        return ctx.invoke_tool("pay", timeout).status

    sub = runqueue.submit(kind="rt.timeout")
    assert testing.execute(claimed(lease_seconds=30)) == "succeeded"
    assert Run.objects.get(id=sub.run.id).result == "uncertain"
    assert Run.objects.uncertain().filter(id=sub.run.id).exists()


def test_result_that_is_not_json_fails_clearly() -> None:
    @runqueue.handler("rt.badresult")
    def _handler(ctx):
        return {1, 2}

    sub = runqueue.submit(kind="rt.badresult")
    assert testing.execute(claimed(lease_seconds=30)) == "failed"
    failure = Run.objects.get(id=sub.run.id).failure
    assert failure["message"].startswith("the handler's result could not be stored")


def test_a_database_outage_under_the_handler_is_left_to_lease_expiry() -> None:
    """Not the run's fault: no failure is recorded; the lease expires and the
    sweeper requeues it."""
    from django.db import OperationalError

    @runqueue.handler("rt.outage")
    def _handler(ctx):
        raise OperationalError("server closed the connection unexpectedly")

    sub = runqueue.submit(kind="rt.outage")
    lease = claimed(lease_seconds=30)
    with pytest.raises(OperationalError):
        testing.execute(lease)
    run = Run.objects.get(id=sub.run.id)
    assert (run.status, run.failure) == ("running", None)
