"""Hostile payloads against every demo and chaos kind: each fails the run
permanently, at once, with a message naming the field; none sleeps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import runqueue
from demo import handlers as demo
from runqueue import leases, registry, testing
from runqueue.errors import PermanentError
from runqueue.models import Run

pytestmark = pytest.mark.django_db

BIG = "x" * 10_000
#: (kind, payload, the field the failure must name)
HOSTILE: list[tuple[str, Any, str]] = [
    ("demo.research", {"steps": 8, "step_seconds": 86400}, "step_seconds"),
    ("demo.research", {"step_seconds": -1}, "step_seconds"),
    ("demo.research", {"step_seconds": "1"}, "step_seconds"),
    ("demo.research", {"step_seconds": 1e300}, "step_seconds"),
    ("demo.research", {"step_seconds": True}, "step_seconds"),
    ("demo.research", {"steps": 10**9}, "steps"),
    ("demo.research", {"steps": -3}, "steps"),
    ("demo.research", {"steps": "7"}, "steps"),
    ("demo.research", {"steps": 2.5}, "steps"),
    ("demo.research", {"topic": BIG}, "topic"),
    ("demo.research", {"topic": {"a": 1}}, "topic"),
    ("demo.research", {"sleep": 5}, "sleep"),
    ("demo.research", "hi", "payload"),
    ("demo.research", [1, 2], "payload"),
    ("demo.agent_turn", {"scenario": "explode"}, "scenario"),
    ("demo.agent_turn", {"scenario": 3}, "scenario"),
    ("demo.agent_turn", {"order_id": BIG}, "order_id"),
    ("demo.agent_turn", {"order_id": ["A"]}, "order_id"),
    ("demo.agent_turn", "hi", "payload"),
    ("demo.digest", "hi", "payload"),
    ("demo.digest", {"day": BIG}, "day"),
    ("demo.digest", {"day": 1e300}, "day"),
    ("demo.digest", {"extra": 1}, "extra"),
]


@pytest.fixture
def no_sleep(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(demo.time, "sleep", slept.append)
    return slept


@pytest.fixture
def chaos(monkeypatch, no_sleep: list[float]) -> Any:
    """tools.chaos.handlers, imported without leaving its kind registered (the
    project installs it only for the chaos command)."""
    was_registered = registry.is_registered("chaos.turn")
    from tools.chaos import handlers

    if not was_registered:
        registry.unregister("chaos.turn")
    monkeypatch.setattr(handlers.time, "sleep", no_sleep.append)
    return handlers


@pytest.mark.parametrize(("kind", "payload", "field"), HOSTILE)
def test_a_hostile_demo_payload_fails_permanently_naming_the_field(
    kind: str, payload: Any, field: str, no_sleep: list[float]
) -> None:
    run = runqueue.submit(kind=kind, payload=payload, max_attempts=5).run
    lease = leases.claim_one("w-hostile")
    assert lease is not None and lease.run_id == run.id
    assert testing.execute(lease) == "failed"
    failed = Run.objects.get(id=run.id)
    assert failed.failure["classification"] == "permanent", failed.failure
    assert failed.failure["error_type"] == "PermanentError", failed.failure
    assert field in failed.failure["message"], failed.failure
    assert len(failed.failure["message"]) < 300  # a 10 KB value is not echoed
    assert no_sleep == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"work_ms": 150_000}, "work_ms"),
        ({"work_ms": -1}, "work_ms"),
        ({"work_ms": "9"}, "work_ms"),
        ({"steps": 10**6}, "steps"),
        ({"ask": "yes"}, "ask"),
        ({"sleep": 1}, "sleep"),
        ("hi", "payload"),
    ],
)
def test_a_hostile_chaos_payload_fails_permanently_naming_the_field(
    payload: Any, field: str, chaos: Any, no_sleep: list[float]
) -> None:
    ctx = SimpleNamespace(
        payload=payload, payloads=[payload], state=None, input=None, run=SimpleNamespace(id=1)
    )
    with pytest.raises(PermanentError, match=field):
        chaos.turn(ctx)
    assert no_sleep == []


def test_the_demo_payloads_the_demo_submits_are_accepted(no_sleep: list[float]) -> None:
    for kind, payload in [
        ("demo.research", {"topic": "t", "steps": 2, "step_seconds": 5}),
        ("demo.research", {"steps": 0}),
        ("demo.research", None),
        ("demo.digest", {"day": "today"}),
    ]:
        run = runqueue.submit(kind=kind, payload=payload).run
        lease = leases.claim_one("w-ok")
        assert lease is not None and lease.run_id == run.id
        assert testing.execute(lease) == "succeeded", Run.objects.get(id=run.id).failure
