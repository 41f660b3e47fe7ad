"""``runworker --processes``: how the slots are shared out and what each
child is told."""

from __future__ import annotations

from runqueue.worker.processes import child_args, split
from runqueue.worker.spec import SlotSpec


def specs(*texts: str) -> list[SlotSpec]:
    return [SlotSpec.parse(t) for t in texts]


def test_each_value_is_shared_out_the_first_children_taking_the_remainder() -> None:
    assert split(specs("async=8"), 2) == [["async=4"], ["async=4"]]
    assert split(specs("interactive=2", "async=5", "maintenance=1"), 2) == [
        ["interactive=1", "async=3", "maintenance=1"],
        ["interactive=1", "async=2"],
    ]
    assert split(specs("async=500:loop", "interactive,async=1"), 3) == [
        ["async=167:loop", "interactive,async=1"],
        ["async=167:loop"],
        ["async=166:loop"],
    ]


def test_a_child_with_no_slot_is_not_started() -> None:
    assert split(specs("async=2"), 4) == [["async=1"], ["async=1"]]


def test_a_child_gets_the_options_its_id_and_its_port() -> None:
    options = {
        "verbosity": 1,
        "lease_seconds": 30.0,
        "sweep_seconds": 5.0,
        "poll_seconds": 2.0,
        "grace_seconds": 30.0,
        "heartbeat_seconds": None,
        "claim_ahead": 16,
        "claim_lanes": 2,
        "burst": True,
        "metrics_port": 9108,
        "metrics_host": "127.0.0.1",
        "worker_id": "w",
    }
    args = child_args(options, ["async=4"], 1)
    assert "--burst" in args and "--slots=async=4" in args
    assert "--worker-id=w-1" in args and "--metrics-port=9109" in args
    assert "--lease-seconds=30.0" in args and not any("processes" in a for a in args)
    assert not any("heartbeat" in a for a in args)


def test_a_worker_settles_its_heap_before_it_claims() -> None:
    """runworker freezes what it loaded (settle_heap): a full collection then
    walks only what was made since, not Django and the handlers' modules
    (what that saves is measured in docs/log/performance-2026-12-07.md)."""
    import gc

    from runqueue.worker.pool import settle_heap

    gc.collect()
    before = len(gc.get_objects())
    settle_heap()
    try:
        assert gc.get_freeze_count() > before - 100 > 10_000
        assert len(gc.get_objects()) < 1_000  # what a collection still walks
    finally:
        gc.unfreeze()
