"""The worker channel's wake-ups (runqueue.events.wakeups): each payload reads back
as what was sent, one not runqueue's reads as nothing, and the texts are
the ones the SQL's own NOTIFYs send; and the per-process cache the claim
choice reads (runqueue.capacity.cached)."""

from __future__ import annotations

import threading
import uuid

import pytest

from runqueue.capacity.cached import Cached
from runqueue.events import wakeups
from runqueue.models import PriorityClass

RUN = uuid.UUID("12345678-1234-5678-1234-567812345678")


@pytest.mark.parametrize(
    ("wakeup", "text"),
    [
        (wakeups.Due(), ""),
        (wakeups.Due(priority_class=PriorityClass.ASYNC), "async"),
        (wakeups.Changed(setting="concurrency"), "concurrency"),
        (wakeups.Changed(setting="budgets"), "budgets"),
        (wakeups.Cancelled(run_id=RUN, epoch=7), f"cancel:{RUN}:7"),
        (wakeups.Probe(token="abc"), "probe:abc"),
    ],
)
def test_a_wakeup_reads_back_as_sent(wakeup: wakeups.Wakeup, text: str) -> None:
    assert wakeups.payload(wakeup) == text
    assert wakeups.parse(text) == wakeup


@pytest.mark.parametrize("text", ["elsewhere", "cancel:nope:1", f"cancel:{RUN}:x", "cancel:"])
def test_a_payload_not_runqueues_is_no_wakeup(text: str) -> None:
    assert wakeups.parse(text) is None


def test_a_priority_wakes_its_class() -> None:
    assert wakeups.due(None) == wakeups.Due()
    assert wakeups.due(0) == wakeups.Due(priority_class=PriorityClass.INTERACTIVE)
    assert wakeups.payload(wakeups.due(25)) == "maintenance"


def test_a_cached_value_is_read_once_until_invalidated() -> None:
    reads: list[int] = []

    def read() -> int:
        reads.append(len(reads))
        return len(reads)

    cached = Cached(read)
    assert (cached.get(), cached.get()) == (1, 1)
    cached.invalidate()
    assert cached.get() == 2
    assert cached.refresh() == 3 and cached.get() == 3
    assert len(reads) == 3


def test_a_refresh_during_a_read_is_kept() -> None:
    """A read that began before a refresh finished does not overwrite it."""
    started, go = threading.Event(), threading.Event()
    values = iter(["old", "new"])

    def read() -> str:
        value = next(values)
        if value == "old":
            started.set()
            assert go.wait(10)
        return value

    cached = Cached(read)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(cached.get()))
    reader.start()
    assert started.wait(10)
    assert cached.refresh() == "new"
    go.set()
    reader.join(10)
    assert got == ["old"] and cached.get() == "new"
