"""The async streaming turn of docs/handlers.md, run as written: a fake async model
client streams tokens, the turn calls a tool, and a "stop" mid-stream
cancels it at its current ``await`` with its ``finally`` run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

import pytest

import runqueue
from runqueue import Idempotency, events, leases, testing
from runqueue.models import EventLog, Run, RunStatus, ToolInvocation
from runqueue.runtime import aio
from tests.database.docs.docs_blocks import named
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
TOKENS = ["Sure", ",", " here", " is", " the", " plan", " 🙂"]


class FakeModelClient:
    """An async client's streaming call: tokens, then (if ``hang``) a wait
    that only a cancel ends, like a provider that stalls."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.closed = False
        self.waiting = threading.Event()  # set once it stalls

    async def stream(self, prompt: str) -> AsyncIterator[str]:
        for token in TOKENS:
            await asyncio.sleep(0)
            yield token
        if self.hang:
            self.waiting.set()
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


clients: list[FakeModelClient] = []
hang = False


def model_client() -> FakeModelClient:
    clients.append(FakeModelClient(hang))
    return clients[-1]


async def fetch_weather(city: str) -> dict:
    return {"summary": f"light rain in {city}"}


def _docs_handler() -> None:
    code = named("stream-example").code
    namespace = {
        "runqueue": runqueue,
        "Idempotency": Idempotency,
        "model_client": model_client,
        "fetch_weather": fetch_weather,
    }
    exec(compile(code, "docs/handlers.md", "exec"), namespace)  # noqa: S102 - our own docs


_docs_handler()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    global hang  # noqa: PLW0603
    clients.clear()
    hang = False
    yield
    aio.close_connections()


def _text(run_id: object) -> str:
    chunks = EventLog.objects.filter(run_id=run_id, type=events.TEXT).order_by("id")
    chars: list[str] = []
    for data in chunks.values_list("data", flat=True):
        chars[data["offset"] :] = list(data["text"])
    return "".join(chars)


def test_the_turn_streams_calls_its_tool_and_returns_the_streamed_text() -> None:
    run = runqueue.submit(kind="agent.stream_turn", payload={"prompt": "plan?"}).run
    assert testing.execute(leases.claim_one("w", lease_seconds=30)) == "succeeded"
    run.refresh_from_db()
    assert run.result["text"] == "".join(TOKENS) + "\n\nIn Oslo: light rain in Oslo"
    assert _text(run.id) == run.result["text"]  # what a client assembles
    assert ToolInvocation.objects.get(run_id=run.id).status == "completed"
    assert clients[0].closed


def test_stop_cancels_the_turn_at_its_await_and_its_finally_runs() -> None:
    global hang  # noqa: PLW0603
    hang = True
    run = runqueue.submit(kind="agent.stream_turn", payload={"prompt": "plan?"}).run
    lease = leases.claim_one("w", lease_seconds=30)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(testing.execute(lease)))
    worker.start()
    wait_until(lambda: clients and clients[0].waiting.is_set(), what="the model to stall")
    runqueue.cancel(run.id, reason="user pressed stop", actor="alice")
    lease.cancel("cancelled")  # what the worker's listener does on the cancel's NOTIFY
    worker.join(30)
    assert done == ["fenced"]  # the cancel decided the outcome
    assert clients[0].closed
    assert Run.objects.get(id=run.id).status == RunStatus.CANCELLED
    assert not ToolInvocation.objects.filter(run_id=run.id).exists()  # stopped before the tool
