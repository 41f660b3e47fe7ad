"""RunQueueBackend: django.tasks enqueued as runs, run by the runqueue worker,
read back as TaskResults."""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

import runqueue
from runqueue import leases, testing
from runqueue.models import EventLog, PriorityClass, Run
from runqueue.tasks_backend import KIND, RunQueueBackend, TaskCancelled, runqueue_priority
from tests.helpers import expire_lease
from tests.workers import tasks

pytestmark = pytest.mark.django_db


def _work(owner: str = "tasks-test") -> str:
    """Claim the next due run of any class in this process and run it."""
    lease = leases.claim_one(owner, leases.ALL_CLASSES)
    assert lease is not None, "nothing was due"
    return testing.execute(lease)


@pytest.fixture
def signals():
    seen: list[tuple[str, str, object]] = []

    def receiver(name):
        def record(sender, task_result, **kwargs):
            seen.append((name, task_result.status, sender))

        return record

    receivers = {
        s: receiver(n)
        for s, n in (
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        )
    }
    for signal, fn in receivers.items():
        signal.connect(fn)
    yield seen
    for signal, fn in receivers.items():
        signal.disconnect(fn)


def test_the_configured_backend_supports_everything() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, RunQueueBackend)
    assert (
        backend.supports_defer,
        backend.supports_priority,
        backend.supports_get_result,
        backend.supports_async_task,
    ) == (True, True, True, True)


def test_enqueue_run_and_read_back_the_result(signals) -> None:
    result = tasks.add.enqueue(2, b=3)
    assert (result.status, result.args, result.kwargs, result.attempts) == (
        TaskResultStatus.READY,
        [2],
        {"b": 3},
        0,
    )
    run = Run.objects.get(id=result.id)
    assert (run.kind, run.payload["task_path"], run.priority) == (
        KIND,
        "tests.workers.tasks.add",
        15,
    )
    assert _work("w1") == "succeeded"
    result.refresh()
    assert (result.status, result.return_value, result.worker_ids) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        ["w1"],
    )
    assert result.started_at <= result.finished_at
    assert result.last_attempted_at is not None
    again = tasks.add.get_result(result.id)
    assert (again.status, again.return_value, again.errors) == ("SUCCESSFUL", 5, [])
    assert signals == [
        ("enqueued", "READY", RunQueueBackend),
        ("started", "RUNNING", RunQueueBackend),
        ("finished", "SUCCESSFUL", RunQueueBackend),
    ]


def test_an_exception_is_a_failed_result_with_its_traceback(signals) -> None:
    result = tasks.explode.enqueue("boom")
    assert _work() == "failed"
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert "ValueError: boom" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018 - the property raises
    assert Run.objects.get(id=result.id).failure["error_type"] == "ValueError"
    assert signals[-1] == ("finished", "FAILED", RunQueueBackend)


def test_deferred_task_waits_for_run_after() -> None:
    when = timezone.now() + dt.timedelta(hours=1)
    result = tasks.add.using(run_after=when).enqueue(1, 1)
    assert Run.objects.get(id=result.id).scheduled_for == when
    assert result.task.run_after == when
    assert leases.claim_one("w", leases.ALL_CLASSES) is None
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
    assert default_task_backend.get_result(result.id).task.run_after == when


@pytest.mark.parametrize(
    ("priority", "class_name", "expected"),
    [
        (100, "interactive", 0),
        (0, "interactive", 5),
        (-100, "interactive", 9),
        (100, "async", 10),
        (0, "async", 15),
        (-100, "maintenance", 29),
    ],
)
def test_priority_mapping(priority, class_name, expected) -> None:
    assert runqueue_priority(priority, class_name) == expected


def test_priority_mapping_is_monotonic_and_stays_in_its_class() -> None:
    for name, cls in (("interactive", 0), ("async", 10), ("maintenance", 20)):
        values = [runqueue_priority(p, name) for p in range(100, -101, -1)]
        assert values == sorted(values)
        assert {PriorityClass.of(v) for v in values} == {PriorityClass(cls)}


def test_queue_picks_the_class_and_priority_orders_within_it() -> None:
    low = tasks.add.using(priority=-50).enqueue(0, 0)
    high = tasks.add.using(priority=50).enqueue(0, 1)
    interactive = tasks.urgent.enqueue()
    assert Run.objects.get(id=interactive.id).priority == 0
    order = [leases.claim_one("w", leases.ALL_CLASSES).run_id for _ in range(3)]
    assert [str(i) for i in order] == [interactive.id, high.id, low.id]


def test_validation_messages_are_djangos() -> None:
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100."):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid for backend."):
        tasks.add.using(queue_name="nope")
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime."):
        tasks.add.using(run_after=dt.datetime(2030, 1, 1))  # noqa: DTZ001


def test_context_attempt_counts_claims(fast_retry) -> None:
    result = tasks.attempt_of.enqueue()
    first = leases.claim_one("w1", leases.ALL_CLASSES)
    expire_lease(first.run_id)
    leases.sweep()
    assert _work("w2") == "succeeded"
    result.refresh()
    assert result.return_value == {"attempt": 2, "id": result.id}
    assert result.worker_ids == ["w1", "w2"]


def test_async_task_runs() -> None:
    result = tasks.double.enqueue(21)
    assert _work() == "succeeded"
    assert default_task_backend.get_result(result.id).return_value == 42


def test_return_values_are_normalised_and_non_json_fails() -> None:
    ok = tasks.pair.enqueue()
    bad = tasks.not_json.enqueue()
    assert {_work(), _work()} == {"succeeded", "failed"}
    assert default_task_backend.get_result(ok.id).return_value == [1, "two"]
    failed = default_task_backend.get_result(bad.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is TypeError


def test_unknown_and_malformed_ids_do_not_exist() -> None:
    for result_id in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)
    plain = runqueue.submit(kind="test.echo").run
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(plain.id))


def test_another_tasks_result_is_a_mismatch() -> None:
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        tasks.explode.get_result(result.id)


def test_cancelled_run_is_a_failed_result() -> None:
    result = tasks.add.enqueue(1, 2)
    runqueue.cancel(result.id, reason="not needed", actor="tester")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TaskCancelled


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "tests.workers.tasks.NOT_A_TASK",
            "'tests.workers.tasks.NOT_A_TASK' is a str, not a django.tasks Task",
        ),
        ("tests.workers.tasks.plain_function", "is a function, not a django.tasks Task"),
        ("os.system", "'os.system' is a builtin_function_or_method, not a django.tasks Task"),
        ("tests.workers.tasks.missing", "task 'tests.workers.tasks.missing' does not import"),
        ("os.system('id')", "not a task path: \"os.system('id')\""),
    ],
)
def test_a_stored_path_that_is_not_a_task_is_never_run(path, message) -> None:
    run = runqueue.submit(
        kind=KIND, payload={"task_path": path, "args": [], "kwargs": {}, "backend": "default"}
    ).run
    assert _work() == "failed"
    failure = Run.objects.get(id=run.id).failure
    assert (failure["classification"], failure["error_type"]) == ("permanent", "InvalidTaskPath")
    assert message in failure["message"]
    assert EventLog.objects.filter(run_id=run.id, type="task.error").count() == 1


def test_async_twins() -> None:
    result = async_to_sync(tasks.add.aenqueue)(4, 5)
    assert _work() == "succeeded"
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert fetched.return_value == 9


@pytest.mark.django_db(transaction=True)
def test_enqueue_is_part_of_the_callers_transaction(raw_connect) -> None:
    other = raw_connect()
    with transaction.atomic():
        result = tasks.add.enqueue(1, 1)
        seen = other.execute("SELECT count(*) FROM runqueue_run WHERE id = %s", (result.id,))
        assert seen.fetchone()[0] == 0
    seen = other.execute("SELECT count(*) FROM runqueue_run WHERE id = %s", (result.id,))
    assert seen.fetchone()[0] == 1


def test_check_reports_bad_options_and_queues() -> None:
    backend = RunQueueBackend(
        "bad",
        {
            "QUEUES": ["default", "reports"],
            "OPTIONS": {"queue_classes": {"x": "urgent"}, "max_attempts": 0, "colour": 1},
        },
    )
    assert sorted(m.id for m in backend.check()) == [
        "runqueue.E011",
        "runqueue.E012",
        "runqueue.E013",
        "runqueue.E014",
    ]
    open_queues = RunQueueBackend("open", {"QUEUES": []})
    assert [m.id for m in open_queues.check()] == ["runqueue.W010"]
    assert open_queues.queue_class("anything") == "async"
    assert task_backends["default"].check() == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_runworker_runs_enqueued_tasks(start_worker) -> None:
    """The operator's worker process runs @task functions like any handler."""
    ok = tasks.add.enqueue(20, 22)
    bad = tasks.explode.enqueue("from the worker")
    worker = start_worker("--burst", "--worker-id", "tasks-burst")
    assert worker.wait(120) == 0, worker.output()
    done = tasks.add.get_result(ok.id)
    assert (done.status, done.return_value, done.attempts) == (TaskResultStatus.SUCCESSFUL, 42, 1)
    assert done.worker_ids[0].startswith("tasks-burst/")  # the slot that claimed it
    failed = tasks.explode.get_result(bad.id)
    assert failed.status == TaskResultStatus.FAILED
    assert "ValueError: from the worker" in failed.errors[0].traceback
