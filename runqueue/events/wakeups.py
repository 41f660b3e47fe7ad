"""The wake-ups a worker hears on its NOTIFY channel
(``RUNQUEUE["NOTIFY_CHANNEL"]``), typed: each payload's text is written
here once, with its parsing, so a sender and the worker reading it cannot
disagree. The SQL's own NOTIFYs (a resumed parent, a promoted turn, a
resumed wait, created runs) send ``Due`` payloads too: ``''`` or a
class's slug.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from django.db import connection

from runqueue.conf import get_settings
from runqueue.models import PriorityClass
from runqueue.sql import execute

#: What ``Changed`` names: the concurrency limits, or the budgets.
Setting = Literal["concurrency", "budgets"]

_CANCEL = "cancel:"
_PAUSE = "pause:"
_PROBE = "probe:"
_CHANGED: tuple[Setting, ...] = ("concurrency", "budgets")


@dataclass(frozen=True, slots=True, kw_only=True)
class Due:
    """Runs became due in a class (None: in any): idle slots claim."""

    priority_class: PriorityClass | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Changed:
    """Concurrency limits or budgets changed: read them again, then claim
    (a new limit or budget may change which claim runs, a raised one may
    make runs claimable)."""

    setting: Setting


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    """A run was cancelled and is at ``epoch`` now: a lease of an older
    epoch stops its handler (the fence still judges its writes)."""

    run_id: uuid.UUID
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Paused:
    """A running run was paused (runqueue.capacity.pausing.pause_run): its handler is
    given back at its next step (``ctx`` call). Its lease stays good."""

    run_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """A listener's probe of its own LISTEN (runqueue.worker.listener)."""

    token: str


Wakeup = Due | Changed | Cancelled | Paused | Probe


def payload(wakeup: Wakeup) -> str:
    """The NOTIFY payload of ``wakeup``."""
    match wakeup:
        case Due(priority_class=cls):
            return "" if cls is None else cls.slug
        case Changed(setting=setting):
            return setting
        case Cancelled(run_id=run_id, epoch=epoch):
            return f"{_CANCEL}{run_id}:{epoch}"
        case Paused(run_id=run_id):
            return f"{_PAUSE}{run_id}"
        case Probe(token=token):
            return f"{_PROBE}{token}"


def parse(text: str) -> Wakeup | None:
    """The wake-up a payload says, or None for one that is not runqueue's
    (a worker ignores it)."""
    if not text:
        return Due()
    if text in _CHANGED:
        return Changed(setting=text)
    if text.startswith(_PROBE):
        return Probe(token=text.removeprefix(_PROBE))
    if text.startswith(_CANCEL):
        run_id, _, epoch = text.removeprefix(_CANCEL).partition(":")
        try:
            return Cancelled(run_id=uuid.UUID(run_id), epoch=int(epoch))
        except ValueError:
            return None
    if text.startswith(_PAUSE):
        try:
            return Paused(run_id=uuid.UUID(text.removeprefix(_PAUSE)))
        except ValueError:
            return None
    try:
        return Due(priority_class=PriorityClass.from_slug(text))
    except ValueError:
        return None


def due(priority: int | None) -> Due:
    """Runs of a priority's class became due (None: of any class)."""
    return Due(priority_class=None if priority is None else PriorityClass.of(priority))


def send(wakeup: Wakeup) -> None:
    """NOTIFY ``wakeup`` on the worker channel, on Django's connection:
    delivered when the caller's transaction commits."""
    params = {"channel": get_settings().NOTIFY_CHANNEL, "payload": payload(wakeup)}
    with connection.cursor() as cursor:
        execute(cursor, "notify", params)
