"""A hypothesis state machine of the run life cycle against a pure model.

Random interleavings of submit, claim, heartbeat, expire, sweep, checkpoint,
finish, give up, wait, deliver input and cancel, with stale workers kept
around. After every step: at most one active run per session, epochs never
decrease, terminal is final, the database equals the model, every transition
has exactly its event, and the event log alone rebuilds each run's status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import runqueue
from runqueue import events, leases, testing
from runqueue.errors import ActiveRunConflict, IdempotencyConflict, InvalidTransition
from runqueue.models import ACTIVE_STATUSES, TERMINAL_STATUSES, EventLog, Run
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db(transaction=True)

SESSIONS = [None, "s1", "s2"]
KEYS = [None, "k1", "k2", "k3"]


@dataclass
class ModelRun:
    id: object
    session: str | None
    status: str = "queued"
    epoch: int = 0
    attempts: int = 0
    max_attempts: int = 2
    expired: bool = False
    history: list[str] = field(default_factory=lambda: ["queued"])

    def move(self, status: str) -> None:
        self.status = status
        self.history.append(status)


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Run.objects.all().delete()
        self.runs: list[ModelRun] = []
        self.keys: dict[str, tuple[str, ModelRun]] = {}
        self.leases: list[leases.Lease] = []
        self.seen_epochs: dict[object, int] = {}
        self.terminal_seen: dict[object, str] = {}

    # --- helpers -------------------------------------------------------------

    def _run(self, run_id) -> ModelRun:
        return next(r for r in self.runs if r.id == run_id)

    def _owned(self, lease: leases.Lease) -> bool:
        run = self._run(lease.run_id)
        return run.status == "running" and run.epoch == lease.epoch

    def _active_in(self, session: str | None) -> ModelRun | None:
        if session is None:
            return None
        return next(
            (r for r in self.runs if r.session == session and r.status in ACTIVE_STATUSES), None
        )

    # --- rules -----------------------------------------------------------------

    @rule(
        session=st.sampled_from(SESSIONS),
        key=st.sampled_from(KEYS),
        body=st.integers(0, 1),
        max_attempts=st.sampled_from([1, 2]),
    )
    def submit(self, session, key, body, max_attempts) -> None:
        request = json.dumps([session, body])
        expected: object
        if key in self.keys:
            known_request, known_run = self.keys[key]
            expected = ("replayed", known_run) if known_request == request else IdempotencyConflict
        elif (active := self._active_in(session)) is not None:
            expected = (
                ("input_delivered", active)
                if active.status == "waiting_for_user"
                else ActiveRunConflict
            )
        else:
            expected = ("created", None)
        try:
            sub = runqueue.submit(
                kind="k",
                payload={"b": body},
                session_id=session,
                idempotency_key=key,
                max_attempts=max_attempts,
            )
        except (IdempotencyConflict, ActiveRunConflict) as exc:
            assert expected is type(exc), (expected, exc)
            return
        assert isinstance(expected, tuple), (expected, sub)
        outcome, model_run = expected
        assert sub.outcome == outcome
        if outcome == "created":
            model_run = ModelRun(id=sub.run.id, session=session, max_attempts=max_attempts)
            self.runs.append(model_run)
        elif outcome == "input_delivered":
            model_run.epoch += 1
            model_run.attempts = 0
            model_run.move("queued")
        assert sub.run.id == model_run.id
        if key is not None and outcome != "replayed":
            self.keys[key] = (request, model_run)

    @rule(worker=st.sampled_from(["w1", "w2"]))
    def claim(self, worker) -> None:
        due = [r for r in self.runs if r.status == "queued"]
        lease = leases.claim_one(worker, lease_seconds=300)
        if not due:
            assert lease is None
            return
        assert lease is not None and lease.run_id == due[0].id  # oldest first
        run = due[0]
        run.epoch += 1
        run.attempts += 1
        run.expired = False
        run.move("running")
        assert lease.epoch == run.epoch
        self.leases.append(lease)

    @rule(i=st.integers(0, 50))
    def heartbeat(self, i) -> None:
        if self.leases:
            lease = self.leases[i % len(self.leases)]
            owned = self._owned(lease)
            assert leases.heartbeat(lease) is owned
            if owned:
                self._run(lease.run_id).expired = False

    @rule(i=st.integers(0, 50))
    def checkpoint(self, i) -> None:
        if self.leases:
            lease = self.leases[i % len(self.leases)]
            owned = self._owned(lease)
            assert leases.checkpoint(lease, {"i": i}) is owned
            if owned:
                self._run(lease.run_id).expired = False

    @rule(i=st.integers(0, 50))
    def expire(self, i) -> None:
        running = [r for r in self.runs if r.status == "running"]
        if running:
            run = running[i % len(running)]
            expire_lease(run.id)
            run.expired = True

    @rule(i=st.integers(0, 50))
    def expire_and_sweep(self, i) -> None:
        self.expire(i)
        self.sweep()

    @rule()
    def sweep(self) -> None:
        expected = {r.id for r in self.runs if r.status == "running" and r.expired}
        swept = leases.sweep()
        assert {row[0] for row in swept} == expected
        for run_id, status, epoch, _attempts in swept:
            run = self._run(run_id)
            run.epoch += 1
            run.move("failed" if run.attempts >= run.max_attempts else "queued")
            assert (status, epoch) == (run.status, run.epoch)

    @rule(i=st.integers(0, 50), how=st.sampled_from(["succeed", "fail", "give_up", "wait"]))
    def finish(self, i, how) -> None:
        if not self.leases:
            return
        lease = self.leases[i % len(self.leases)]
        owned = self._owned(lease)
        if how == "succeed":
            ok = testing.succeed(lease, {"i": i})
        elif how == "fail":
            ok = testing.fail(lease, leases.permanent_failure(ValueError("x"), lease.attempt))
        elif how == "give_up":
            ok = leases.give_up(lease, ValueError("flaky"))
        else:
            ok = leases.wait_for_user(lease, "?")
        assert ok is owned
        if not owned:
            return
        run = self._run(lease.run_id)
        if how == "give_up":
            run.epoch += 1
            run.move("failed" if run.attempts >= run.max_attempts else "queued")
        else:
            run.move({"succeed": "succeeded", "fail": "failed", "wait": "waiting_for_user"}[how])

    @rule(i=st.integers(0, 50))
    def cancel(self, i) -> None:
        if not self.runs:
            return
        run = self.runs[i % len(self.runs)]
        if run.status in TERMINAL_STATUSES:
            with pytest.raises(InvalidTransition):
                runqueue.cancel(run.id, reason="r", actor="a")
            return
        runqueue.cancel(run.id, reason="r", actor="a")
        run.epoch += 1
        run.move("cancelled")

    # --- invariants --------------------------------------------------------------

    @invariant()
    def database_matches_model(self) -> None:
        rows = {r.id: r for r in Run.objects.all()}
        assert set(rows) == {r.id for r in self.runs}
        active_sessions = [
            r.session_id for r in rows.values() if r.session_id and r.status in ACTIVE_STATUSES
        ]
        assert len(active_sessions) == len(set(active_sessions)), "two active runs in a session"
        for model in self.runs:
            row = rows[model.id]
            assert (row.status, row.lease_epoch, row.attempts) == (
                model.status,
                model.epoch,
                model.attempts,
            )
            assert row.lease_epoch >= self.seen_epochs.get(row.id, 0), "epoch went down"
            self.seen_epochs[row.id] = row.lease_epoch
            if row.id in self.terminal_seen:
                assert row.status == self.terminal_seen[row.id], "terminal is final"
            elif row.status in TERMINAL_STATUSES:
                self.terminal_seen[row.id] = row.status

    @invariant()
    def event_log_rebuilds_every_status_history(self) -> None:
        for model in self.runs:
            types = (
                EventLog.objects.filter(run_id=model.id)
                .order_by("id")
                .values_list("type", flat=True)
            )
            rebuilt = [events.STATUS_OF[t] for t in types if t in events.STATUS_OF]
            assert rebuilt == model.history


def test_run_life_cycle_state_machine(fast_retry) -> None:
    run_state_machine_as_test(
        Lifecycle,
        settings=settings(
            max_examples=100,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
