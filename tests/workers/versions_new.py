"""A deploy's newer code: ``versions.k`` at versions 1 and 2 (2 makes its
tool calls in the other order, and takes over version 1's runs between
turns) and the new kind ``versions.j``."""

from __future__ import annotations

from typing import Any

import runqueue
from runqueue import RunContext
from tests.workers.versions_old import J, K, call, finished, hold, k_v1  # noqa: F401 - registers K v1


@runqueue.handler(K, version=2, migrate_from=(1,))
def k_v2(ctx: RunContext) -> Any:
    b = call(ctx, "b")
    hold(ctx)
    a = call(ctx, "a")
    return finished(ctx, 2, a=a, b=b)


@runqueue.handler(J)
def j_v1(ctx: RunContext) -> Any:
    return finished(ctx, 1)
