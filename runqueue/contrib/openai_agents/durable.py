"""The durable run the current task belongs to (``Durable``, in a context
variable: nested runs and the SDK's own tasks inherit it and nothing else
sees it), the idempotency key of the tool call running now, and how a
value is recorded as JSON: what the adapter's parts (runner, model, tools,
sessions, steering) share."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import pydantic_core
from agents.items import TResponseInputItem

from runqueue.contrib import steps
from runqueue.runtime.async_context import AsyncRunContext
from runqueue.types import JSON

#: The attribute ``idempotent_tool`` sets on a tool.
IDEMPOTENT_MARK = "_runqueue_idempotent"


@dataclasses.dataclass(frozen=True, slots=True)
class Durable:
    """The durable run the current task belongs to."""

    ctx: AsyncRunContext
    idempotent: frozenset[str]
    #: Text deltas go to the run's stream (``run_streamed``, outermost agent only).
    stream: bool = False
    #: How a steering message reads as the user's words (None: not read).
    steer: Callable[[JSON], str] | None = steps.steer_text
    #: The server keeps the conversation (``previous_response_id``,
    #: ``conversation_id``): a steer is sent once, not with every request.
    server_managed: bool = False
    #: The steers this run took: (where in the SDK's input, the items).
    steered: list[tuple[int, list[TResponseInputItem]]] = dataclasses.field(default_factory=list)


#: The durable run active in this task (None: the SDK runs as without runqueue).
ACTIVE: ContextVar[Durable | None] = ContextVar("runqueue_openai_agents", default=None)
#: The idempotency key of the tool call running now (``idempotency_key``).
KEY: ContextVar[str | None] = ContextVar("runqueue_openai_agents_key", default=None)


def idempotent_tool[T](tool: T) -> T:
    """Mark a tool safe to run again after a crash (``Idempotency.IDEMPOTENT``):
    a call its worker died in runs again instead of ending ``uncertain``."""
    setattr(tool, IDEMPOTENT_MARK, True)
    return tool


def idempotency_key() -> str | None:
    """Inside a tool a durable run calls: a key that is the same on every
    attempt of this call (hand it to the service the tool writes to); None
    elsewhere."""
    return KEY.get()


@contextlib.contextmanager
def active(durable: Durable) -> Iterator[None]:
    """``durable`` is the active run while the block runs."""
    token = ACTIVE.set(durable)
    try:
        yield
    finally:
        ACTIVE.reset(token)


def jsonable(value: Any) -> JSON:
    """A value as JSON the way pydantic dumps it (by alias), for hashing and records."""
    dumped: JSON = pydantic_core.to_jsonable_python(value, by_alias=True, fallback=str)
    return dumped
