"""The schema itself enforces the queue's rules, whoever writes the rows."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from runqueue.models import PriorityClass, Run, RunStatus
from tests.database.factories import IdempotencyKeyFactory, RunFactory

pytestmark = pytest.mark.django_db


def _constraint_of(excinfo: pytest.ExceptionInfo[IntegrityError]) -> str:
    return excinfo.value.__cause__.diag.constraint_name


def test_second_active_run_in_a_session_is_rejected() -> None:
    RunFactory(session_id="s1")
    with pytest.raises(IntegrityError) as excinfo, transaction.atomic():
        RunFactory(session_id="s1")
    assert _constraint_of(excinfo) == "runqueue_run_one_active_per_session"


def test_raw_sql_insert_is_rejected_by_the_database(raw_connect) -> None:
    """The rule lives in PostgreSQL, not in Python: a raw INSERT hits it too."""
    conn = raw_connect()
    insert = (
        "INSERT INTO runqueue_run (id, tenant, principal, session_id, kind, payload, status,"
        " priority, attempts, max_attempts, lease_epoch, lease_owner, concurrency_key)"
        " VALUES (%s, 'default', '', 's-raw', 'k', '{}', %s, 0, 0, 3, 0, '', 'default')"
    )
    conn.execute(insert, (uuid.uuid4(), "queued"))
    with pytest.raises(psycopg.errors.UniqueViolation) as excinfo:
        conn.execute(insert, (uuid.uuid4(), "queued"))
    assert excinfo.value.diag.constraint_name == "runqueue_run_one_active_per_session"


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_new_run_allowed_once_the_first_is_terminal(status: str) -> None:
    RunFactory(session_id="s1", status=status, finished_at=timezone.now())
    RunFactory(session_id="s1")
    assert Run.objects.filter(session_id="s1").count() == 2


def test_waiting_for_user_holds_the_session_slot() -> None:
    RunFactory(session_id="s1", status=RunStatus.WAITING_FOR_USER)
    with pytest.raises(IntegrityError) as excinfo, transaction.atomic():
        RunFactory(session_id="s1")
    assert _constraint_of(excinfo) == "runqueue_run_one_active_per_session"


def test_runs_without_a_session_are_unconstrained() -> None:
    RunFactory.create_batch(3, session_id=None)
    assert Run.objects.filter(session_id__isnull=True).active().count() == 3


def test_same_session_id_in_another_tenant_is_another_session() -> None:
    RunFactory(session_id="s1", tenant="a")
    RunFactory(session_id="s1", tenant="b")
    assert Run.objects.active().filter(session_id="s1").count() == 2


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"status": "exploded"}, "runqueue_run_status_valid"),
        ({"priority": -1}, "runqueue_run_priority_gte_0"),
        ({"attempts": -1}, "runqueue_run_attempts_in_range"),
        ({"attempts": 4, "max_attempts": 3}, "runqueue_run_attempts_in_range"),
        ({"max_attempts": 0}, "runqueue_run_max_attempts_gte_1"),
        ({"lease_epoch": -5}, "runqueue_run_epoch_gte_0"),
        ({"status": RunStatus.RUNNING}, "runqueue_run_running_has_lease"),
        ({"status": RunStatus.SUCCEEDED}, "runqueue_run_terminal_has_finished_at"),
        ({"kind": ""}, "runqueue_run_kind_not_empty"),
    ],
)
def test_check_constraints_keep_columns_sane(fields: dict, constraint: str) -> None:
    with pytest.raises(IntegrityError) as excinfo, transaction.atomic():
        RunFactory(**fields)
    assert _constraint_of(excinfo) == constraint


def test_idempotency_key_unique_per_tenant_principal_key() -> None:
    IdempotencyKeyFactory(key="k1", principal="alice")
    with pytest.raises(IntegrityError) as excinfo, transaction.atomic():
        IdempotencyKeyFactory(key="k1", principal="alice")
    assert _constraint_of(excinfo) == "runqueue_idempotency_key_unique"


def test_same_key_under_another_principal_or_tenant_is_another_key() -> None:
    IdempotencyKeyFactory(key="k1", principal="alice")
    IdempotencyKeyFactory(key="k1", principal="bob")
    IdempotencyKeyFactory(key="k1", principal="alice", tenant="other")


def test_created_at_comes_from_the_database_clock() -> None:
    run = RunFactory()
    run.refresh_from_db()
    assert abs((run.created_at - timezone.now()).total_seconds()) < 60


@pytest.mark.parametrize(
    ("priority", "cls"),
    [
        (0, PriorityClass.INTERACTIVE),
        (9, PriorityClass.INTERACTIVE),
        (10, PriorityClass.ASYNC),
        (19, PriorityClass.ASYNC),
        (20, PriorityClass.MAINTENANCE),
        (300, PriorityClass.MAINTENANCE),
    ],
)
def test_priority_class_is_a_range(priority: int, cls: PriorityClass) -> None:
    assert PriorityClass.of(priority) is cls
    low, high = cls.bounds
    assert low <= priority <= high
