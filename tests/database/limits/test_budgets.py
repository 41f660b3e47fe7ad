"""Budgets for model calls: a run with a budget is claimed only once its
call is reserved on the budget's window, a run that does not fit stays
queued while the claim takes others, settle refunds or charges, reserve and
wait_for_budget cover further calls, a paused budget reserves nothing, and
tenants waiting on one budget take turns."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

import runqueue
from runqueue import leases, runtime
from runqueue.capacity import budgets
from runqueue.errors import InvalidArgument, InvalidSubmission
from runqueue.leases.outcomes import BudgetWait, Reported
from runqueue.models import Budget, Checkpoint, EventLog, Run, RunStatus

pytestmark = pytest.mark.django_db


def _budget(key: str = "openai:gpt-5", **limits: object) -> Budget:
    values: dict[str, object] = {"tokens": 1000, "requests": 10, "per_seconds": 60}
    values.update(limits)
    return Budget.objects.create(key=key, **values)


def _window(key: str = "openai:gpt-5") -> tuple[int, int]:
    (window,) = [w for w in budgets.windows() if w.key == key]
    return window.used_tokens, window.used_requests


def _submit(tokens: int | None, *, tenant: str = "default", key: str = "openai:gpt-5") -> Run:
    budget = None if tokens is None else (key, tokens)
    return runqueue.submit(kind="k", tenant=tenant, budget=budget).run


def _claim(limit: int = 5) -> list[leases.Lease]:
    return leases.claim("w", limit=limit)


def test_a_claim_reserves_the_call_and_takes_only_what_fits() -> None:
    """Three calls of 400 on a budget of 1000: two are claimed and reserved,
    the third stays queued while the claim takes the run behind it."""
    _budget()
    first, second, third = (_submit(400) for _ in range(3))
    plain = _submit(None)
    claimed = {lease.run_id for lease in _claim()}
    assert claimed == {first.id, second.id, plain.id}
    assert Run.objects.get(id=third.id).status == RunStatus.QUEUED
    assert _window() == (800, 2)
    lease = next(lease for lease in _claim() if lease) if False else None  # noqa: SIM222
    assert lease is None
    assert Run.objects.get(id=first.id).budget_reserved == 400
    (window,) = budgets.windows()
    assert (window.queued, window.waiting) == (1, 1)


def test_requests_are_counted_too() -> None:
    _budget(tokens=None, requests=2)
    runs = [_submit(0) for _ in range(3)]
    assert len(_claim()) == 2
    assert Run.objects.filter(id__in=[r.id for r in runs], status="queued").count() == 1


def test_the_plain_claim_never_takes_a_run_with_a_budget(settings) -> None:
    """A worker that does not know of budgets yet (its cache says none)
    leaves a budgeted run queued: nothing is claimed past a budget."""
    _budget()
    run = _submit(100)
    budgets._known._held = (False,)  # a stale cache: the plain statement
    assert _claim() == []
    budgets.invalidate()
    assert [lease.run_id for lease in _claim()] == [run.id]


def test_settle_refunds_into_the_reserved_bucket_and_charges_extra_now() -> None:
    _budget()
    _submit(400)
    (lease,) = _claim()
    assert leases.settle(lease, 150) == -250
    assert _window() == (150, 1)
    assert lease.reservations == []
    with pytest.raises(ValueError, match="no model call is reserved"):
        leases.settle(lease, 10)
    assert leases.reserve(lease, "openai:gpt-5", 100)
    assert leases.settle(lease, 300) == 200
    assert _window() == (450, 2)
    run = Run.objects.get(id=lease.run_id)
    assert (run.budget_reserved, run.budget_used) == (500, 450)
    types = list(
        EventLog.objects.filter(run_id=run.id, type__startswith="budget.").values_list(
            "type", flat=True
        )
    )
    assert types == ["budget.settled", "budget.reserved", "budget.settled"]


def test_a_reservation_larger_than_the_window_waits_for_an_empty_one() -> None:
    """A budget lowered below a queued call: the call fits an empty window
    only, so it is never stuck."""
    budget = _budget(tokens=1000)
    small = _submit(100)
    big = _submit(900)
    Budget.objects.filter(id=budget.id).update(tokens=500)
    assert [lease.run_id for lease in _claim()] == [small.id]
    assert Run.objects.get(id=big.id).status == RunStatus.QUEUED
    with connection.cursor() as cursor:  # the window empties
        cursor.execute(
            "UPDATE runqueue_budget SET ring_buckets = '{}', ring_tokens = '{}',"
            " ring_requests = '{}'"
        )
    assert [lease.run_id for lease in _claim()] == [big.id]


def test_submit_refuses_an_unknown_budget_and_a_call_larger_than_the_budget() -> None:
    _budget(tokens=1000)
    with pytest.raises(InvalidSubmission, match="'nope' is no budget"):
        runqueue.submit(kind="k", budget=("nope", 1))
    with pytest.raises(InvalidSubmission, match="1001 tokens are more than"):
        runqueue.submit(kind="k", budget=("openai:gpt-5", 1001))
    with pytest.raises(InvalidSubmission, match=r"budget: must be \(key, tokens\)"):
        runqueue.submit(kind="k", budget="openai:gpt-5")  # type: ignore[arg-type]
    with pytest.raises(InvalidSubmission, match="tokens must be an integer >= 0"):
        runqueue.submit(kind="k", budget=("openai:gpt-5", -1))
    assert not Run.objects.exists()


def test_submit_many_declares_budgets_per_run() -> None:
    _budget()
    made = runqueue.submit_many(
        [
            runqueue.SubmitRequest(kind="k", budget=("openai:gpt-5", 10)),
            runqueue.SubmitRequest(kind="k"),
        ]
    )
    stored = {r.id: (r.budget_key, r.budget_tokens) for r in Run.objects.all()}
    assert stored[made[0].run.id] == ("openai:gpt-5", 10)
    assert stored[made[1].run.id] == (None, None)
    assert made[0].run.budget_key == "openai:gpt-5"


def test_a_settings_budget_gets_its_row_on_first_use(settings) -> None:
    settings.RUNQUEUE = {
        **settings.RUNQUEUE,
        "BUDGETS": {"anthropic:opus": {"tokens": 500, "shares": {"acme": 2}}},
    }
    run = runqueue.submit(kind="k", budget=("anthropic:opus", 200)).run
    budget = Budget.objects.get(key="anthropic:opus")
    assert (budget.tokens, budget.requests, budget.per_seconds) == (500, None, 60)
    assert budget.shares == {"acme": 2}
    assert [lease.run_id for lease in _claim()] == [run.id]


def test_a_paused_budget_reserves_nothing_until_its_time() -> None:
    _budget()
    run = _submit(10)
    until = runqueue.pause_budget("openai:gpt-5", 30)
    assert until > timezone.now() + dt.timedelta(seconds=25)
    # A shorter pause does not shorten it.
    assert runqueue.pause_budget("openai:gpt-5", dt.timedelta(seconds=1)) == until
    assert _claim() == []
    (window,) = budgets.windows()
    assert window.paused_until == until and window.waiting == 1
    assert budgets.resume_budget("openai:gpt-5")
    assert [lease.run_id for lease in _claim()] == [run.id]
    (lease,) = [lease for lease in [_claim_one_more()] if lease] or [None]
    assert lease is None
    with pytest.raises(InvalidArgument, match="no budget 'nope'"):
        runqueue.pause_budget("nope", 1)


def _claim_one_more() -> leases.Lease | None:
    return leases.claim_one("w")


def test_reserve_fails_on_a_paused_budget_and_wait_for_budget_gives_the_slot_back() -> None:
    """The handler's path on a 429: pause, reserve says no, wait_for_budget
    queues the run with its attempt handed back and its call declared; once
    resumed, the claim reserves the call and the handler resumes from its
    state holding it."""
    _budget()
    run = runqueue.submit(kind="k").run
    (lease,) = _claim()
    runqueue.pause_budget("openai:gpt-5", 60)
    ctx = runtime.build_context(lease)
    assert not ctx.reserve("openai:gpt-5", 300)
    outcome = ctx.wait_for_budget("openai:gpt-5", 300, state={"step": 2})
    assert isinstance(outcome, BudgetWait)
    assert leases.label(lease, outcome, leases.write(lease, outcome)) == Reported.BUDGET_WAIT
    stored = Run.objects.get(id=run.id)
    assert (stored.status, stored.attempts) == (RunStatus.QUEUED, 0)
    assert (stored.budget_key, stored.budget_tokens) == ("openai:gpt-5", 300)
    assert Checkpoint.objects.get(run_id=run.id).state == {"step": 2}
    assert _claim() == []  # still paused
    budgets.resume_budget("openai:gpt-5")
    (again,) = _claim()
    assert runtime.build_context(again).state == {"step": 2}
    assert [(r.key, r.tokens) for r in again.reservations] == [("openai:gpt-5", 300)]
    assert _window() == (300, 1)


def test_wait_for_budget_refuses_an_unknown_budget() -> None:
    runqueue.submit(kind="k")
    (lease,) = _claim()
    with pytest.raises(InvalidArgument, match="'nope' is no budget"):
        runtime.build_context(lease).wait_for_budget("nope", 1)


def test_tenants_waiting_on_one_budget_take_turns() -> None:
    """Tenant a's runs are all older than b's: with both waiting, the claim
    alternates between them instead of serving a's backlog first."""
    _budget(tokens=10_000, requests=1000)
    for _ in range(6):
        _submit(100, tenant="a")
    for _ in range(6):
        _submit(100, tenant="b")
    order = []
    for _ in range(8):
        (lease,) = leases.claim("w", limit=1)
        order.append(lease.run.tenant)
    assert order[:2] in (["a", "b"], ["b", "a"])
    for i in range(0, 8, 2):
        assert sorted(order[i : i + 2]) == ["a", "b"], order


def test_shares_weight_the_turns() -> None:
    """Share 3 against 1 with equal calls: three of every four claims."""
    _budget(tokens=100_000, requests=1000, shares={"big": 3})
    for _ in range(20):
        _submit(100, tenant="small")
    for _ in range(20):
        _submit(100, tenant="big")
    tenants = [leases.claim("w", limit=1)[0].run.tenant for _ in range(16)]
    assert tenants.count("big") == 12, tenants


def test_a_run_given_back_before_its_handler_started_refunds_its_call() -> None:
    """One request a minute: a claimed run given back before its handler
    started (``release(..., unstarted=True)``: a stopping worker, a lease
    claimed ahead) gives its request and tokens back into the bucket they
    were reserved in, so it is claimed again at once; given back after its
    handler started, the call may have been made: it keeps them."""
    _budget(tokens=1000, requests=1)
    run = _submit(400)
    (lease,) = _claim()
    assert _window() == (400, 1)

    assert leases.release(lease, "shutdown", unstarted=True)

    assert _window() == (0, 0)
    assert lease.reservations == []
    stored = Run.objects.get(id=run.id)
    assert (stored.status, stored.budget_reserved) == (RunStatus.QUEUED, 0)
    refunded = EventLog.objects.get(run_id=run.id, type="budget.refunded")
    assert refunded.data == {"key": "openai:gpt-5", "tokens": 400}
    assert refunded.lease_epoch == lease.epoch
    (again,) = _claim()  # at once: the window has its request back
    assert again.run_id == run.id and _window() == (400, 1)
    assert leases.release(again, "shutdown")  # its handler ran
    assert _window() == (400, 1)
    assert _claim() == []
    assert Run.objects.get(id=run.id).budget_reserved == 400
