"""The README's "Rolling deploys" handler blocks, registered as written,
with stand-in tools that record their calls: imported by
tests/test_readme_versions.py and, through RUNQUEUE_TEST_HANDLER_MODULES,
by the process that runs the README's ``runqueue_replay`` command."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import runqueue

README = Path(__file__).resolve().parent.parent / "README.md"
CALLS: list[tuple[str, Any]] = []


def block(name: str, language: str = "python") -> str:
    text = README.read_text()
    found = re.search(rf"<!-- {name} -->\n```{language}\n(.*?)```\n<!-- /{name} -->", text, re.S)
    assert found is not None, f"the README's {name} block"
    return found.group(1)


def lookup_order(id: int) -> dict:  # noqa: A002 - the README's argument name
    CALLS.append(("lookup_order", id))
    return {"order": id, "total": 40}


def lookup_customer(id: int) -> dict:  # noqa: A002 - the README's argument name
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
exec(compile(block("versions-example"), "README.md", "exec"), NAMESPACE)  # noqa: S102 - our README
exec(compile(block("patched-example"), "README.md", "exec"), NAMESPACE)  # noqa: S102 - our README
