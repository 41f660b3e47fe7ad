"""submit_in_transaction: a keyless submit that joins the caller's transaction
(what django.tasks' enqueue needs)."""

from __future__ import annotations

import pytest
from django.db import transaction

import runqueue
from runqueue.errors import ActiveRunConflict
from runqueue.models import EventLog, Run
from runqueue.submission.submit import submit_in_transaction

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_exists_for_others_only_once_the_caller_commits(raw_connect) -> None:
    other = raw_connect()
    listener = raw_connect()
    listener.execute("LISTEN runqueue")
    with transaction.atomic():
        run = submit_in_transaction(kind="k", payload={"a": 1}).run
        count = other.execute("SELECT count(*) FROM runqueue_run WHERE id = %s", (run.id,))
        assert count.fetchone()[0] == 0
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    count = other.execute("SELECT count(*) FROM runqueue_run WHERE id = %s", (run.id,))
    assert count.fetchone()[0] == 1
    assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == ["interactive"]
    assert list(EventLog.objects.filter(run_id=run.id).values_list("type", flat=True)) == [
        "run.created"
    ]


def test_a_rollback_leaves_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        submit_in_transaction(kind="k")
        raise RuntimeError("the caller failed")
    assert Run.objects.count() == 0
    assert EventLog.objects.count() == 0


def test_a_session_conflict_leaves_the_callers_transaction_usable() -> None:
    active = runqueue.submit(kind="k", session_id="s1").run
    with transaction.atomic():
        with pytest.raises(ActiveRunConflict) as excinfo:
            submit_in_transaction(kind="k", session_id="s1")
        assert excinfo.value.run_id == active.id
        after = submit_in_transaction(kind="k", session_id="s2").run
    assert Run.objects.filter(id=after.id).exists()


def test_submit_still_refuses_to_nest() -> None:
    with pytest.raises(RuntimeError, match="durable atomic block"), transaction.atomic():
        runqueue.submit(kind="k")
