"""The fork and usage examples of docs/handlers-runs.md, run as written: the fork of a
dead-lettered run from its third step with an edited payload; the usage
handler (with a fake model client), priced from the example's PRICES, and
the totals."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

import runqueue
from runqueue import leases, testing
from runqueue.history import usage
from runqueue.models import Run, RunStatus
from tests.database.docs.docs_blocks import named

pytestmark = pytest.mark.django_db


def _block(name: str) -> str:
    return named(name).code


class _Responses:
    def create(self, *, model: str, input: str) -> Any:  # noqa: A002 - the client's name
        return SimpleNamespace(
            output_text=f"an answer to {input}",
            usage=SimpleNamespace(input_tokens=800_000, output_tokens=100_000),
        )


#: The handler block, registered once (its RUNQUEUE is read by the tests).
HANDLER: dict[str, Any] = {"runqueue": runqueue, "client": SimpleNamespace(responses=_Responses())}
exec(compile(_block("usage-handler"), "docs/handlers-runs.md", "exec"), HANDLER)  # noqa: S102 - our docs


def test_the_fork_example(transactional_db) -> None:
    sub = runqueue.submit(kind="test.steps", payload={"steps": 4, "fail_after": 2})
    lease = leases.claim_one("w-test")
    assert lease is not None and testing.execute(lease) == "failed"
    namespace = {"runqueue": runqueue, "Run": Run, "run_id": sub.run.id}
    exec(compile(_block("fork-example"), "docs/handlers-runs.md", "exec"), namespace)  # noqa: S102
    fork = namespace["fork"]
    assert list(fork.tool_invocations.values_list("seq", flat=True)) == [0, 1]
    assert fork.payload == {"steps": 4, "fail_after": 2, "model": "gpt-5-mini"}


def test_the_usage_example(settings, transactional_db) -> None:
    settings.RUNQUEUE = {**settings.RUNQUEUE, **HANDLER["RUNQUEUE"]}
    namespace = {"runqueue": runqueue, "month_start": dt.datetime(2000, 1, 1, tzinfo=dt.UTC)}
    exec(compile(_block("usage-totals"), "docs/handlers-runs.md", "exec"), namespace)  # noqa: S102
    run = namespace["run"]
    assert usage.spend_cap_of(run.id) == 5
    lease = leases.claim_one("w-test")
    assert lease is not None and testing.execute(lease) == "succeeded"
    assert Run.objects.get(id=run.id).status == RunStatus.SUCCEEDED
    totals = usage.run_totals(run.id)
    # 0.8 M tokens in at 1.25, 0.1 M out at 10.0 per million
    assert (totals.input_tokens, totals.output_tokens, totals.cost) == (
        800_000,
        100_000,
        Decimal("2"),
    )
    assert usage.tree_totals(run.id) == totals
    exec(compile(_block("usage-totals"), "docs/handlers-runs.md", "exec"), namespace)  # noqa: S102
    assert usage.tenant_totals("default", since=namespace["month_start"]) == totals
