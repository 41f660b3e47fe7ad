"""ctx.record_usage: tokens and cost per run, priced from RUNQUEUE["PRICES"]
when not given, summed up the tree, the session and the tenant; a fenced
worker's usage counted, once; a spend cap ending its tree; the metrics and
the GenAI span attributes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from decimal import Decimal

import pytest
from prometheus_client import REGISTRY

import runqueue
from runqueue import leases, testing
from runqueue.history import usage
from runqueue.models import EventLog, Run, RunStatus, TreeSpend, Usage
from runqueue.runtime import aio
from tests.handlers import ledger
from tests.helpers import expire_lease, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_ledger")]

PRICES = {"m-big": {"input": 2.5, "output": 10}, "m-free": {"input": 0, "output": 0}}


@pytest.fixture(autouse=True)
def _prices(settings) -> None:
    settings.RUNQUEUE = {
        **settings.RUNQUEUE,
        "PRICES": PRICES,
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
    }


def _drain() -> None:
    """Run every due run in this process until none is left."""
    while (lease := leases.claim_one("w-test", lease_seconds=30)) is not None:
        testing.execute(lease)


def _call(model: str, tokens_in: int, tokens_out: int, cost: object = None) -> dict:
    call = {"model": model, "in": tokens_in, "out": tokens_out}
    return call if cost is None else {**call, "cost": cost}


def test_a_call_is_priced_per_million_tokens_given_or_left_unknown() -> None:
    run = runqueue.submit(
        kind="test.usage",
        payload={
            "calls": [
                _call("m-big", 1_000_000, 100_000),  # 2.5 + 1.0
                _call("m-unknown", 7, 3),  # no price, no cost: unknown, not an error
                _call("m-unknown", 1, 1, "0.25"),  # given
                _call("m-big", 0, 0, 0),
            ]
        },
    ).run
    _drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure
    assert run.result == {"costs": ["3.500000000000", None, "0.250000000000", "0E-12"]}
    totals = usage.run_totals(run.id)
    assert totals == usage.Totals(
        input_tokens=1_000_008,
        output_tokens=100_004,
        cost=Decimal("3.75"),
        calls=4,
        unpriced_calls=1,
    )
    assert usage.tree_totals(run.id) == totals


def test_bad_input_is_a_value_error_and_records_nothing() -> None:
    for call, message in (
        (_call("m", -1, 0), "input_tokens must be an integer >= 0, got -1"),
        (_call("m", 1.5, 0), "input_tokens must be an integer >= 0, got 1.5"),
        (_call("m", True, 0), "input_tokens must be an integer >= 0, got True"),
        (_call("m", 0, "3"), "output_tokens must be an integer >= 0, got '3'"),
        (_call("", 0, 0), "model must be a 1-255 character string"),
        (_call("m", 0, 0, -1), "cost must be a finite number from 0"),
        (_call("m", 0, 0, "NaN"), "cost must be a finite number from 0"),
        (_call("m", 0, 0, "abc"), "cost must be a number >= 0"),
    ):
        run = runqueue.submit(kind="test.usage", payload={"calls": [call]}).run
        _drain()
        run.refresh_from_db()
        assert run.status == RunStatus.FAILED
        assert run.failure["error_type"] == "ValueError"
        assert message in run.failure["message"], run.failure["message"]
        assert not Usage.objects.filter(run_id=run.id).exists()


def test_usage_is_summed_up_the_tree_the_session_and_the_tenant(start_worker) -> None:
    """A root and two children (one with a child of its own), each recording
    calls in a real worker: the tree's totals are every call's; the
    session's too (the children hold no session: they count in their
    root's); the tenant's add another session's run."""
    tree = runqueue.submit(
        kind="test.usage",
        session_id="chat-1",
        tenant="acme",
        payload={
            "calls": [_call("m-big", 100, 10)],
            "children": [
                {"calls": [_call("m-big", 200, 20)]},
                {
                    "calls": [_call("m-unknown", 5, 5)],
                    "children": [{"calls": [_call("m-big", 400, 40)]}],
                },
            ],
        },
    ).run
    other = runqueue.submit(
        kind="test.usage",
        session_id="chat-2",
        tenant="acme",
        payload={"calls": [_call("m", 1, 1, 1)]},
    ).run
    worker = start_worker(
        "--slots", "interactive=1", "--slots", "async=2", settings={"PRICES": PRICES}
    )
    wait_until(
        lambda: Run.objects.filter(status__in=["succeeded", "failed"]).count() == 5,
        timeout=60,
        what=f"the runs to end: {worker.output()}",
    )
    assert Run.objects.get(id=tree.id).status == RunStatus.SUCCEEDED
    runs = Run.objects.filter(id=tree.id) | Run.objects.filter(parent__isnull=False)
    assert runs.count() == 4
    price = Decimal("0.0025") * 700 / 1000 + Decimal("0.01") * 70 / 1000
    expected = usage.Totals(
        input_tokens=705, output_tokens=75, cost=price, calls=4, unpriced_calls=1
    )
    assert usage.tree_totals(tree.id) == expected
    grandchild = Run.objects.filter(parent__parent_id=tree.id).get()
    assert usage.tree_totals(grandchild.id) == expected  # any run of the tree finds its root
    assert usage.run_totals(grandchild.id).input_tokens == 400
    assert usage.session_totals("acme", "chat-1") == expected
    tenant = usage.tenant_totals("acme")
    assert (tenant.calls, tenant.cost) == (5, price + 1)
    assert usage.tenant_totals("nobody") == usage.Totals()
    assert set(Usage.objects.values_list("root_id", flat=True)) == {tree.id, other.id}


def test_a_fenced_workers_usage_counts_once() -> None:
    """Worker A's lease is lost (expired, swept, claimed by B) while its
    handler waits; A then records its call (the money was spent): counted,
    marked fenced, and its finish is fenced. B's call counts too; A's call
    written again counts nothing more."""
    run = runqueue.submit(
        kind="test.usage", payload={"block": True, "calls": [_call("m-big", 1000, 100)]}
    ).run
    lease_a = leases.claim_one("w-a", lease_seconds=30)
    assert lease_a is not None
    done: list[str] = []
    thread = threading.Thread(target=lambda: done.append(testing.execute(lease_a)))
    thread.start()
    expire_lease(run.id)
    assert [row[0] for row in leases.sweep()] == [run.id]
    lease_b = leases.claim_one("w-b", lease_seconds=30)
    assert lease_b is not None and lease_b.epoch > lease_a.epoch
    ledger(run.id, "release")
    thread.join(30)
    assert done == ["fenced"]
    assert testing.execute(lease_b) == "succeeded"
    rows = list(Usage.objects.filter(run_id=run.id).order_by("lease_epoch"))
    assert [(u.lease_epoch, u.call, u.fenced) for u in rows] == [
        (lease_a.epoch, 0, True),
        (lease_b.epoch, 0, False),
    ]
    again = usage.record(
        lease_a.run,
        epoch=lease_a.epoch,
        token=lease_a.token,
        attempt=lease_a.attempt,
        call=0,
        root=(run.id, None),
        model="m-big",
        input_tokens=1000,
        output_tokens=100,
        cost=Decimal("0.0035"),
    )
    assert not again.counted
    assert Usage.objects.filter(run_id=run.id).count() == 2
    spend = TreeSpend.objects.get(run_id=run.id)
    assert (spend.calls, spend.input_tokens, spend.cost) == (2, 2000, Decimal("0.007"))


def test_a_spend_cap_ends_the_tree() -> None:
    """A tree capped at 1: the first child records 0.6, the second 0.6 more,
    which reaches the cap: its record raises SpendCapReached, and the root
    (waiting for its children), the second child and the third (queued) are
    cancelled with reason spend_cap, each with a failure record saying so."""
    root = runqueue.submit(
        kind="test.usage",
        spend_cap=Decimal("1"),
        payload={
            "children": [
                {"calls": [_call("m", 1, 1, "0.6")]},
                {"calls": [_call("m", 1, 1, "0.6")]},
                {"calls": [_call("m", 1, 1, "0.6")]},
            ]
        },
    ).run
    lease = leases.claim_one("w", lease_seconds=30)
    assert testing.execute(lease) == "waiting"
    children = list(Run.objects.filter(parent_id=root.id).order_by("created_at"))
    first = leases.claim_one("w", lease_seconds=30)
    assert first.run_id == children[0].id and testing.execute(first) == "succeeded"
    second = leases.claim_one("w", lease_seconds=30)
    assert second.run_id == children[1].id
    assert testing.execute(second) == "fenced"  # cancelled while recording
    statuses = dict(
        Run.objects.filter(id__in=[root.id, *[c.id for c in children]]).values_list("id", "status")
    )
    assert statuses == {
        root.id: RunStatus.CANCELLED,
        children[0].id: RunStatus.SUCCEEDED,
        children[1].id: RunStatus.CANCELLED,
        children[2].id: RunStatus.CANCELLED,
    }
    for run_id in (root.id, children[1].id, children[2].id):
        cancelled = EventLog.objects.get(run_id=run_id, type="run.cancelled")
        assert cancelled.data["reason"] == "spend_cap"
        failure = Run.objects.get(id=run_id).failure
        assert failure["classification"] == "spend_cap"
        assert failure["error_type"] == "SpendCapReached"
    spend = TreeSpend.objects.get(run_id=root.id)
    assert (spend.cost, spend.spend_cap) == (Decimal("1.2"), Decimal(1))
    assert spend.capped_at is not None
    assert leases.claim_one("w", lease_seconds=30) is None


def test_spend_cap_is_checked_at_submit() -> None:
    for bad, message in (
        (0, "spend_cap: must be above 0"),
        (-1, "spend_cap: must be a finite number from 0"),
        (True, "spend_cap: must be a number above 0"),
        ("x", "spend_cap: must be a number >= 0"),
    ):
        with pytest.raises(runqueue.InvalidSubmission, match=message):
            runqueue.submit(kind="test.usage", spend_cap=bad)
    assert not Run.objects.exists()
    run = runqueue.submit(kind="test.usage", spend_cap=2.5).run
    assert TreeSpend.objects.get(run_id=run.id).spend_cap == Decimal("2.5")
    assert usage.spend_cap_of(run.id) == Decimal("2.5")


@pytest.fixture
def _loop_connections() -> Iterator[None]:
    yield
    aio.close_connections()


@pytest.mark.usefixtures("_loop_connections")
def test_async_handlers_record_usage_and_the_metrics_count_it() -> None:
    def sample(direction: str) -> float:
        value = REGISTRY.get_sample_value(
            "runqueue_worker_tokens_total",
            {"kind": "test.async_usage", "model": "m-big", "direction": direction},
        )
        return value or 0.0

    before = sample("input"), sample("output")
    cost_before = (
        REGISTRY.get_sample_value(
            "runqueue_worker_cost_total", {"kind": "test.async_usage", "model": "m-big"}
        )
        or 0.0
    )
    run = runqueue.submit(
        kind="test.async_usage",
        payload={"calls": [_call("m-big", 1000, 10), _call("m-big", 3000, 30)]},
    ).run
    _drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.failure
    assert sorted(Usage.objects.filter(run_id=run.id).values_list("call", flat=True)) == [0, 1]
    assert (sample("input") - before[0], sample("output") - before[1]) == (4000, 40)
    cost = REGISTRY.get_sample_value(
        "runqueue_worker_cost_total", {"kind": "test.async_usage", "model": "m-big"}
    )
    assert cost - cost_before == pytest.approx(0.0104)


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ([], "RUNQUEUE['PRICES'] must be a dict from model name"),
        ({"": {"input": 1, "output": 1}}, "keys must be 1-255 character model names"),
        ({"m": {"input": 1}}, "RUNQUEUE['PRICES']['m'] must be {\"input\": ..., \"output\": ...}"),
        ({"m": {"input": -1, "output": 1}}, "['input'] must be a number from 0 to 1,000,000,000"),
        ({"m": {"input": 1, "output": float("nan")}}, "['output'] must be a number from 0"),
        ({"m": {"input": True, "output": 1}}, "['input'] must be a number from 0"),
    ],
)
def test_bad_prices_are_a_settings_error(prices: object, message: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from runqueue.checks import check_settings
    from runqueue.conf import parse

    with pytest.raises(ImproperlyConfigured) as error:
        parse({"PRICES": prices})
    assert message in str(error.value)
    with pytest.MonkeyPatch.context() as patch:
        from django.conf import settings

        patch.setattr(settings, "RUNQUEUE", {"PRICES": prices}, raising=False)
        [found] = check_settings()
    assert found.id == "runqueue.E002" and message in found.msg
