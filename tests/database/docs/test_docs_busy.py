"""The chat example of ``on_busy`` (docs/handlers-sessions.md), run as written: a second message
waits its turn (enqueue), a third interrupts the turn in progress and starts
now, told what the old turn finished, so its search is not made again; the
waiting message follows, in order."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.models import Run, RunStatus
from tests.database.docs.docs_blocks import named
from tests.helpers import Worker, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

searches: list[str] = []
#: While set, the model call waits for ``release`` (a turn busy mid-way).
hold = threading.Event()
holding = threading.Event()
release = threading.Event()


def search(query: str) -> dict:
    searches.append(query)
    return {"hits": 3, "query": query}


def model(messages: list[str], found: Any) -> str:
    if hold.is_set():
        holding.set()
        assert release.wait(30)
    return f"{' / '.join(messages)}: {found['hits']} hits"


def _blocks() -> tuple[str, str]:
    """The example: the handler, and the submits after it."""
    code = named("busy-example").code
    cut = code.index("chat = {")
    return code[:cut], code[cut:]


HANDLER, SUBMITS = _blocks()
NAMESPACE: dict[str, Any] = {"search": search, "model": model}
exec(compile(HANDLER, "docs/handlers-sessions.md", "exec"), NAMESPACE)  # noqa: S102 - our own docs


@pytest.fixture(autouse=True)
def _fresh() -> None:
    searches.clear()
    for event in (hold, holding, release):
        event.clear()


def test_the_example_as_written() -> None:
    namespace = dict(NAMESPACE)
    exec(compile(SUBMITS, "docs/handlers-sessions.md", "exec"), namespace)  # noqa: S102 - our own docs
    first, second, third = namespace["first"], namespace["second"], namespace["third"]
    assert Run.objects.get(id=first.run.id).status == RunStatus.CANCELLED
    # The interrupting turn runs first, then the one that waited in line.
    lease = leases.claim_one("w1")
    assert lease.run_id == third.run.id
    assert testing.execute(lease) == "succeeded"
    assert Run.objects.get(id=third.run.id).result == {"answer": "Only Tuesdays: 3 hits"}
    lease = leases.claim_one("w1")
    assert lease.run_id == second.run.id
    assert testing.execute(lease) == "succeeded"
    assert leases.claim_one("w1") is None
    assert testing.unpromoted_sessions() == []


def test_an_interrupted_turn_s_search_is_not_made_again() -> None:
    chat = {"kind": "chat.reply", "session_id": "conv-8"}
    first = runqueue.submit(**chat, payload={"text": "Flights to Oslo in May?"})
    lease = leases.claim_one("w1")
    hold.set()
    busy = Worker(lambda: testing.execute(lease), name="busy turn")
    busy.start()
    wait_until(holding.is_set, what="the turn to search and then wait on its model")
    hold.clear()
    third = runqueue.submit(**chat, payload={"text": "Only Tuesdays"}, on_busy="interrupt")
    assert third.run.interrupted_id == first.run.id
    release.set()
    # The interrupt's cancel decided the old turn's outcome.
    assert busy.outcome() == "fenced"
    new = leases.claim_one("w1")
    assert new.run_id == third.run.id
    assert testing.execute(new) == "succeeded"
    assert searches == ["Flights to Oslo in May?"]  # once, by the interrupted turn
    assert Run.objects.get(id=third.run.id).result == {"answer": "Only Tuesdays: 3 hits"}
