"""A hypothesis state machine of concurrency caps against a pure model.

Random interleavings of submit (key, priority), claim (some classes, a
limit), finish alone or fused with the next claim, expire and sweep, cancel,
fail and requeue, and cap changes (a limit set, raised, lowered to 0 or
removed; a default cap for maintenance). The model predicts every claim
exactly: the queued runs of the claimed classes in claim order, each taken
unless its (key, class) already has its cap's worth running (the runs the
same statement finishes not counted). So a claim never takes a key past its
cap, and never leaves an eligible run behind a capped one.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import runqueue
from runqueue import leases, testing
from runqueue.leases.outcomes import Succeeded
from runqueue.models import ConcurrencyLimit, PriorityClass, Run, RunStatus
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = ["a", "b", "c"]
PRIORITIES = [0, 5, 10, 20]
CLASSES = list(PriorityClass)
#: RUNQUEUE["CONCURRENCY"] in this test: maintenance runs one per key.
DEFAULT_CAPS = {PriorityClass.MAINTENANCE: 1}


@dataclass
class ModelRun:
    id: object
    key: str
    priority: int
    seq: int
    status: str = "queued"

    @property
    def cls(self) -> PriorityClass:
        return PriorityClass.of(self.priority)


class Caps(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Run.objects.all().delete()
        ConcurrencyLimit.objects.all().delete()
        self.runs: list[ModelRun] = []
        self.limits: dict[tuple[str, PriorityClass], int] = {}
        self.leases: dict[object, leases.Lease] = {}

    # --- the model -----------------------------------------------------------------

    def cap(self, key: str, cls: PriorityClass) -> int | None:
        return self.limits.get((key, cls), DEFAULT_CAPS.get(cls))

    def running(self, key: str, cls: PriorityClass, finishing: set[object] = frozenset()) -> int:
        return sum(
            1
            for r in self.runs
            if r.status == "running" and r.key == key and r.cls == cls and r.id not in finishing
        )

    def predict(self, classes: list[PriorityClass], limit: int, finishing: set[object]) -> list:
        taken: list[ModelRun] = []
        queued = sorted(
            (r for r in self.runs if r.status == "queued" and r.cls in classes),
            key=lambda r: (r.priority, r.seq),
        )
        for run in queued:
            if len(taken) == limit:
                break
            cap = self.cap(run.key, run.cls)
            ahead = sum(1 for t in taken if (t.key, t.cls) == (run.key, run.cls))
            if cap is None or self.running(run.key, run.cls, finishing) + ahead < cap:
                taken.append(run)
        return taken

    def _run(self, run_id: object) -> ModelRun:
        return next(r for r in self.runs if r.id == run_id)

    def _claimed(self, predicted: list[ModelRun], claimed: list[leases.Lease]) -> None:
        assert [lease.run_id for lease in claimed] == [r.id for r in predicted]
        for run, lease in zip(predicted, claimed, strict=True):
            run.status = "running"
            self.leases[run.id] = lease

    def _pick(self, status: str, i: int) -> ModelRun | None:
        chosen = [r for r in self.runs if r.status == status]
        return chosen[i % len(chosen)] if chosen else None

    # --- rules ---------------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), priority=st.sampled_from(PRIORITIES))
    def submit(self, key: str, priority: int) -> None:
        run = runqueue.submit(kind="k", concurrency_key=key, priority=priority).run
        self.runs.append(ModelRun(run.id, key, priority, len(self.runs)))

    @rule(
        classes=st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3, unique=True),
        limit=st.integers(1, 4),
    )
    def claim(self, classes: list[PriorityClass], limit: int) -> None:
        predicted = self.predict(classes, limit, set())
        self._claimed(predicted, leases.claim("w", classes, limit=limit, lease_seconds=300))

    @rule(i=st.integers(0, 50), limit=st.integers(0, 3))
    def finish_and_claim(self, i: int, limit: int) -> None:
        run = self._pick("running", i)
        finishes = [] if run is None else [(self.leases.pop(run.id), Succeeded.of(None))]
        finishing = {run.id} if run is not None else set()
        predicted = self.predict(CLASSES, limit, finishing)
        spec = leases.claim_spec("w", CLASSES, limit=limit, lease_seconds=300)
        ok, claimed = leases.finish_and_claim(finishes, spec)
        assert ok == [True] * len(finishes)
        if run is not None:
            run.status = "succeeded"
        self._claimed(predicted, claimed)

    @rule(i=st.integers(0, 50))
    def expire_and_sweep(self, i: int) -> None:
        run = self._pick("running", i)
        if run is None:
            return
        expire_lease(run.id)
        assert [row[1] for row in leases.sweep()] == [RunStatus.QUEUED]
        self.leases.pop(run.id)
        run.status = "queued"

    @rule(i=st.integers(0, 50), status=st.sampled_from(["queued", "running"]))
    def cancel(self, i: int, status: str) -> None:
        run = self._pick(status, i)
        if run is not None:
            runqueue.cancel(run.id, reason="model", actor="test")
            self.leases.pop(run.id, None)
            run.status = "cancelled"

    @rule(i=st.integers(0, 50))
    def fail(self, i: int) -> None:
        run = self._pick("running", i)
        if run is not None:
            lease = self.leases.pop(run.id)
            assert testing.fail(lease, leases.permanent_failure(ValueError("x"), lease.attempt))
            run.status = "failed"

    @rule(i=st.integers(0, 50))
    def requeue(self, i: int) -> None:
        run = self._pick("failed", i)
        if run is not None:
            leases.requeue(run.id, actor="test")
            run.status = "queued"

    @rule(
        key=st.sampled_from(KEYS),
        cls=st.sampled_from(CLASSES),
        cap=st.one_of(st.none(), st.integers(0, 2)),
    )
    def set_cap(self, key: str, cls: PriorityClass, cap: int | None) -> None:
        if cap is None:
            ConcurrencyLimit.objects.filter(key=key, priority_class=cls).delete()
            self.limits.pop((key, cls), None)
        else:
            ConcurrencyLimit.objects.update_or_create(
                key=key, priority_class=cls, defaults={"max_running": cap}
            )
            self.limits[(key, cls)] = cap

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def database_equals_model(self) -> None:
        statuses = dict(Run.objects.values_list("id", "status"))
        assert statuses == {r.id: r.status for r in self.runs}


def test_caps_state_machine(settings) -> None:
    settings.RUNQUEUE = {
        "CONCURRENCY": {"maintenance": 1},
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
        "MAX_ATTEMPTS": 1000,
    }
    run_state_machine_as_test(
        Caps,
        settings=hypothesis_settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
