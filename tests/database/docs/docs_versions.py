"""The "Rolling deploys" handler blocks of docs/handlers.md, registered as written,
with stand-in tools that record their calls: imported by
tests/database/docs/test_docs_versions.py and, through RUNQUEUE_TEST_HANDLER_MODULES,
by the process that runs the docs' ``runqueue_replay`` command."""

from __future__ import annotations

from typing import Any

import runqueue
from tests.database.docs.docs_blocks import named

CALLS: list[tuple[str, Any]] = []


def block(name: str, language: str = "python") -> str:
    found = named(name)
    assert found.language == language, found.where
    return found.code


def lookup_order(id: int) -> dict:  # noqa: A002 - the example's argument name
    CALLS.append(("lookup_order", id))
    return {"order": id, "total": 40}


def lookup_customer(id: int) -> dict:  # noqa: A002 - the example's argument name
    CALLS.append(("lookup_customer", id))
    return {"customer": id}


def fraud_check(order: int) -> dict:
    CALLS.append(("fraud_check", order))
    return {"ok": True}


def refund_order(order: int) -> dict:
    CALLS.append(("refund", order))
    return {"refunded": order}


NAMESPACE: dict[str, Any] = {
    "runqueue": runqueue,
    "lookup_order": lookup_order,
    "lookup_customer": lookup_customer,
    "fraud_check": fraud_check,
    "refund_order": refund_order,
}
exec(compile(block("versions-example"), "docs/handlers.md", "exec"), NAMESPACE)  # noqa: S102 - our docs
exec(compile(block("patched-example"), "docs/handlers.md", "exec"), NAMESPACE)  # noqa: S102 - our docs
