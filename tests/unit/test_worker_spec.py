"""Slot specs and runworker's options: bad input gets a clear error."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from runqueue.models import PriorityClass
from runqueue.worker.pool import PoolConfig
from runqueue.worker.spec import SlotSpec, shape


@pytest.mark.parametrize(
    ("text", "classes", "count"),
    [
        ("interactive=2", (PriorityClass.INTERACTIVE,), 2),
        ("async=1", (PriorityClass.ASYNC,), 1),
        ("maintenance,interactive=3", (PriorityClass.INTERACTIVE, PriorityClass.MAINTENANCE), 3),
        (" Interactive , async = 4 ", (PriorityClass.INTERACTIVE, PriorityClass.ASYNC), 4),
    ],
)
def test_slot_specs_parse(text: str, classes: tuple, count: int) -> None:
    spec = SlotSpec.parse(text)
    assert (spec.classes, spec.count, spec.loop) == (classes, count, False)


def test_thread_slots_may_be_many_on_at_most_256_threads() -> None:
    """The count is runs at once; async handlers hold no thread, so a
    group may have more slots than threads."""
    assert (SlotSpec.parse("async=300").count, SlotSpec.parse("async=300").slots) == (300, 256)
    assert SlotSpec.parse("async=3").slots == 3
    assert SlotSpec.parse("async=300:loop").slots == 300


def test_slots_on_the_loop_parse_and_may_be_many() -> None:
    spec = SlotSpec.parse("async=500:loop")
    assert (spec.classes, spec.count, spec.loop) == ((PriorityClass.ASYNC,), 500, True)
    assert SlotSpec.parse(" interactive = 2 : LOOP ").loop
    specs = (spec, SlotSpec.parse("async=2"))
    assert shape(specs) == {"async:loop": 500, "async": 2}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interactive", "expected CLASSES=N (e.g. interactive=2), got 'interactive'"),
        ("=2", "expected CLASSES=N"),
        (
            "batch=2",
            "unknown class 'batch' in 'batch=2'; choose from interactive, async, maintenance",
        ),
        ("async,async=2", "class 'async' is named twice"),
        ("async=two", "slot count must be a whole number, got 'two'"),
        ("async=0", "slot count must be between 1 and 10000, got 0"),
        ("async=10001", "slot count must be between 1 and 10000, got 10001"),
        ("async=10001:loop", "slot count must be between 1 and 10000, got 10001"),
        ("async=5:threads", "unknown slot mode 'threads' in 'async=5:threads'; the one mode"),
    ],
)
def test_bad_slot_specs_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + __import__("re").escape(message)):
        SlotSpec.parse(text)


def test_pool_shape() -> None:
    specs = tuple(SlotSpec.parse(s) for s in ("interactive=2", "async=1", "interactive,async=1"))
    assert shape(specs) == {"interactive": 2, "async": 1, "interactive,async": 1}


def test_heartbeat_must_be_shorter_than_the_lease() -> None:
    with pytest.raises(ValueError, match="make --heartbeat-seconds shorter"):
        PoolConfig(lease_seconds=5, heartbeat_seconds=5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slots", "batch=1"], "unknown class 'batch'"),
        (["--lease-seconds", "-1"], "must be more than 0"),
        (["--poll-seconds", "soon"], "expected a number of seconds, got 'soon'"),
        (["--lease-seconds", "5", "--heartbeat-seconds", "6"], "make --heartbeat-seconds shorter"),
        (["--worker-id", "w" * 300], "expected 1-255 printable characters, got 300 characters"),
        (["--worker-id", ""], "expected 1-255 printable characters"),
        (["--worker-id", "a\x01b"], "expected 1-255 printable characters, got 'a\\x01b'"),
        (["--claim-ahead", "9" * 5000], "expected a whole number"),
        (["--metrics-port", "1", "--metrics-host", "a\x00b"], "cannot serve metrics"),
    ],
)
def test_runworker_rejects_bad_options(args: list[str], message: str, capsys) -> None:
    with pytest.raises((CommandError, SystemExit)) as excinfo:
        call_command("runworker", *args)
    shown = str(excinfo.value) + capsys.readouterr().err
    assert message in shown


@pytest.mark.parametrize(
    ("text", "most", "lanes"),
    [
        ("async=8", 2, [(4, 4), (4, 4)]),
        ("async=5", 2, [(3, 3), (2, 2)]),
        ("async=7", 3, [(3, 3), (2, 2), (2, 2)]),
        ("async=1", 2, [(1, 1)]),
        ("async=8", 1, [(8, 8)]),
        ("maintenance=2", 2, [(1, 1), (1, 1)]),
        # A thread spec keeps its threads in all: 300 runs on 256 threads.
        ("async=300", 2, [(150, 128), (150, 128)]),
        ("async=301:loop", 2, [(151, 151), (150, 150)]),
        # The interactive class never claims ahead: one lane, one claim.
        ("interactive=4", 2, [(4, 4)]),
        ("interactive,async=4", 2, [(4, 4)]),
    ],
)
def test_a_spec_splits_into_claim_lanes(text: str, most: int, lanes: list) -> None:
    got = SlotSpec.parse(text).lanes(most)
    assert [(lane.count, lane.slots) for lane in got] == lanes
    firsts = [sum(slots for _count, slots in lanes[:i]) for i in range(len(lanes))]
    assert [lane.first for lane in got] == firsts
    label = SlotSpec.parse(text).label
    assert [lane.label for lane in got] == (
        [label] if len(lanes) == 1 else [f"{label}.{i}" for i in range(len(lanes))]
    )


def test_a_pool_has_a_group_per_lane_with_the_specs_owner_and_unique_slot_names() -> None:
    from runqueue.worker.pool import Pool

    specs = (SlotSpec.parse("interactive=2"), SlotSpec.parse("async=5"))
    pool = Pool(PoolConfig(slots=specs, worker_id="w", claim_lanes=2))
    groups = [(g.label, g.size, g.config.owner) for g in pool.groups]
    assert groups == [
        ("interactive", 2, "w/interactive"),
        ("async.0", 3, "w/async"),
        ("async.1", 2, "w/async"),
    ]
    names = [slot.name for slot in pool.slots]
    assert len(names) == len(set(names))
    assert sum(1 for n in names if n.startswith("async-") and n[6:].isdigit()) == 5
    assert shape(pool.config.slots) == {"interactive": 2, "async": 5}
    one = Pool(PoolConfig(slots=specs, worker_id="w", claim_lanes=1))
    assert [(g.label, g.size) for g in one.groups] == [("interactive", 2), ("async", 5)]


@pytest.mark.parametrize("lanes", [0, 9, -1])
def test_claim_lanes_out_of_range_say_why(lanes: int) -> None:
    with pytest.raises(ValueError, match=f"claim lanes must be between 1 and 8, got {lanes}"):
        PoolConfig(claim_lanes=lanes)


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "must be between 1 and 8, got 0"), ("two", "expected a whole number, got 'two'")],
)
def test_runworker_rejects_bad_claim_lanes(value: str, message: str, capsys) -> None:
    with pytest.raises((CommandError, SystemExit)) as excinfo:
        call_command("runworker", "--claim-lanes", value)
    assert message in str(excinfo.value) + capsys.readouterr().err


@pytest.mark.parametrize(
    ("slots", "warned"),
    [
        (["interactive=2", "async=2"], True),
        (["interactive,async=4"], True),
        (["interactive=2", "async,maintenance=2"], False),
        ([], False),  # the default has a maintenance slot
    ],
)
def test_runworker_warns_when_no_slot_takes_maintenance_runs(slots, warned, caplog) -> None:
    """Issue 47 item 7: a worker none of whose slots take maintenance runs
    never runs the housekeeping (pruning, partitions' retention); runworker
    logs a warning when it starts (a log record, so the project's log format
    applies). (A bad metrics host stops it right after.)"""
    args = [arg for spec in slots for arg in ("--slots", spec)]
    with caplog.at_level("WARNING", logger="runqueue.worker"), pytest.raises(CommandError):
        call_command("runworker", *args, "--metrics-port", "1", "--metrics-host", "a\x00b")
    said = any("takes maintenance runs" in r.getMessage() for r in caplog.records)
    assert said is warned
