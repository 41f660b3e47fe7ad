"""Test-only views into runqueue's internals: nothing in runqueue calls
these, so production code never grows paths that only tests take."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runqueue.leases.base import Lease
    from runqueue.worker.group import Group


# --- the worker ------------------------------------------------------------------


def ready(group: Group) -> list[Lease]:
    """Leases ``group`` claimed ahead that no slot has started yet."""
    with group._cond:
        return list(group._ready)
