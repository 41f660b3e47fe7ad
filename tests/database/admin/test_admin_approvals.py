"""The admin's side of tool approvals: the run page shows pending
approvals and the run as a conversation; staff with the decide permission
decide, with both audit records; bad input is a form error, never a 500."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

import runqueue
from runqueue import Idempotency, leases, testing
from runqueue.models import EventLog, Run, ToolInvocation
from tests.admin_support import PASSWORD, staff
from tests.database.runtime.test_approvals import CALLS

pytestmark = pytest.mark.django_db


def login(username: str, *perms: str) -> Client:
    staff(username, *perms)
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def _reply(text: str, calls: list[dict]) -> dict:
    """A recorded model step's result, as the agent adapters write it."""
    return {
        "kind": "model_response",
        "model": "test:model",
        "text": text,
        "tool_calls": calls,
        "finish_reason": "tool_calls" if calls else "stop",
        "usage": {"input_tokens": 120, "output_tokens": 30},
        "raw": {},
    }


@runqueue.handler("approvals.agent")
def _agent(ctx: runqueue.RunContext):
    """A model step that asks for a refund, then the refund, with approval."""
    ctx.invoke_tool(
        "model:test:model",
        lambda request_sha256: _reply(
            "The order shipped late; I will refund 40.",
            [{"name": "refund", "arguments": {"order": 7, "amount": 40}, "id": "c1"}],
        ),
        args={"request_sha256": "x"},
        idempotency=Idempotency.IDEMPOTENT,
    )
    done = ctx.invoke_tool("refund", _refund, args={"order": 7, "amount": 40}, approval=True)
    return {"refund": done.status}


def _refund(order: int, amount: int) -> dict:
    CALLS.append(("refund", {"order": order, "amount": amount}))
    return {"refunded": amount}


def _asked() -> tuple[Run, ToolInvocation]:
    run = runqueue.submit(kind="approvals.agent", payload={}).run
    assert testing.execute(leases.claim_one("w")) == "waiting"
    return run, ToolInvocation.objects.get(run_id=run.id, seq=1)


def test_the_run_page_shows_the_conversation_and_the_pending_approval() -> None:
    run, tool = _asked()
    client = login("cy", "view_run", "decide_tool")
    page = client.get(reverse("admin:runqueue_run_change", args=[run.id])).content.decode()
    assert "1 tool call(s) await approval" in page
    assert "The order shipped late; I will refund 40." in page
    assert "120 in / 30 out tokens" in page
    assert reverse("admin:runqueue_run_decide", args=[tool.id]) in page

    viewer = login("dee", "view_run")
    page = viewer.get(reverse("admin:runqueue_run_change", args=[run.id])).content.decode()
    assert "1 tool call(s) await approval" in page
    assert reverse("admin:runqueue_run_decide", args=[tool.id]) not in page
    url = reverse("admin:runqueue_run_decide", args=[tool.id])
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"decision": "approve"}).status_code == 403
    assert ToolInvocation.objects.get(id=tool.id).status == "awaiting_approval"


def test_staff_decide_with_both_audit_records_and_the_run_resumes() -> None:
    CALLS.clear()
    run, tool = _asked()
    client = login("cy", "view_run", "decide_tool")
    url = reverse("admin:runqueue_run_decide", args=[tool.id])
    form = client.get(url)
    assert form.status_code == 200 and "refund" in form.content.decode()

    done = client.post(
        url, {"decision": "edit", "reason": "cap at 30", "arguments": '{"order": 7, "amount": 30}'}
    )
    assert done.status_code == 302
    assert Run.objects.get(id=run.id).status == "queued"
    event = EventLog.objects.get(run_id=run.id, type="tool.decided")
    assert (event.data["actor"], event.data["decision"]) == ("staff:cy", "edit")
    entry = LogEntry.objects.get(object_id=str(run.id))
    assert "staff:cy" in entry.change_message and "cap at 30" in entry.change_message

    assert testing.execute(leases.claim_one("w")) == "succeeded"
    assert CALLS == [("refund", {"order": 7, "amount": 30})]
    page = client.get(reverse("admin:runqueue_run_change", args=[run.id])).content.decode()
    assert "edit by staff:cy" in page and "await approval" not in page

    again = client.get(url).content.decode()
    assert "does not await a decision" in again


@pytest.mark.parametrize(
    "data",
    [
        {"decision": "edit", "arguments": "[1, 2]"},
        {"decision": "edit", "arguments": "{"},
        {"decision": "respond", "result": "1e400"},
        {"decision": "maybe"},
        {"decision": "approve", "reason": "x" * 3000},
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_decided(data) -> None:
    run, tool = _asked()
    client = login("cy", "view_run", "decide_tool")
    answer = client.post(reverse("admin:runqueue_run_decide", args=[tool.id]), data)
    assert answer.status_code == 200
    assert "errorlist" in answer.content.decode()
    assert ToolInvocation.objects.get(id=tool.id).status == "awaiting_approval"
    assert Run.objects.get(id=run.id).status == "waiting"
