"""A backend for Django's Tasks framework (``django.tasks``) that runs on runqueue.

``TASKS = {"default": {"BACKEND": "runqueue.tasks_backend.RunQueueBackend",
"QUEUES": ["default", "interactive", "async", "maintenance"]}}``: ``enqueue``
is ``runqueue.submit`` of a run of the built-in kind ``django.tasks`` (in the
caller's transaction, like django-tasks-db), ``runworker`` runs it like any
handler, and ``get_result`` rebuilds the TaskResult from the run and its
events.

Mapping (docs/decisions/sessions.md, "Django Tasks backend"): ``queue_name``
picks the priority class (reserved capacity stays meaningful); the task's
priority (-100..100, higher first) picks a place among the class's first
ten values (lower first): ``low + ((100 - priority) * 9 + 100) // 200``,
with ``low`` the class's lowest priority, so 100 -> +0, 0 -> +5, -100 -> +9.
``run_after`` is ``scheduled_for``.

This module is imported when a ``@task`` is defined, maybe before the app
registry is ready: models are imported inside functions only.
"""

from __future__ import annotations

import datetime as dt
import re
import traceback
import uuid
from typing import TYPE_CHECKING

from django.core import checks
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from runqueue.errors import PermanentError
from runqueue.limits import TENANT_MAX_LENGTH
from runqueue.registry import handler
from runqueue.types import JSON

if TYPE_CHECKING:
    from runqueue.models import Run
    from runqueue.runtime import RunContext

#: The handler kind of every django.tasks run.
KIND = "django.tasks"
#: A handler event per failed attempt: the exception's class path and traceback.
TASK_ERROR = "task.error"

#: A task's priority picks one of at most this many values at the top of its class.
TASK_PLACES = 10
OPTION_KEYS = frozenset({"queue_classes", "max_attempts", "tenant"})

#: Run status -> TaskResultStatus. waiting_for_user and waiting are not
#: finished and not claimable: RUNNING. A cancelled run is FAILED with a TaskCancelled error.
STATUS_MAP: dict[str, TaskResultStatus] = {
    "queued": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "waiting_for_user": TaskResultStatus.RUNNING,
    "waiting": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


class TaskCancelled(Exception):
    """The error of a task whose run was cancelled before it finished."""


class TaskLost(Exception):
    """The error of a task whose worker was lost on its last allowed attempt."""


class InvalidTaskPath(PermanentError):
    """A django.tasks run names something that is not a Task: never run it."""


def default_queue_classes() -> dict[str, str]:
    """queue_name -> class slug: a queue named after a class runs in it, "default"
    in async; OPTIONS["queue_classes"] adds to or overrides it."""
    from runqueue.models import PriorityClass

    return {"default": PriorityClass.ASYNC.slug} | {s: s for s in PriorityClass.slugs()}


def runqueue_priority(task_priority: int, class_name: str) -> int:
    """The run priority of a task priority (-100..100) inside a class."""
    from runqueue.models import PriorityClass

    low, high = PriorityClass.from_slug(class_name).bounds
    last = min(high - low, TASK_PLACES - 1)
    return low + ((100 - task_priority) * last + 100) // 200


def _exception_path(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


class RunQueueBackend(BaseTaskBackend):
    """django.tasks on runqueue: durable, leased, fenced, prioritised."""

    supports_defer = True
    supports_async_task = True  # Task.call runs a coroutine with async_to_sync
    supports_get_result = True
    supports_priority = True

    def queue_class(self, queue_name: str) -> str:
        """The class of a queue; an unmapped one (QUEUES empty) gets default's."""
        classes = default_queue_classes() | dict(self.options.get("queue_classes") or {})
        return classes.get(queue_name, classes["default"])

    def enqueue(self, task: Task, args: list[JSON], kwargs: dict[str, JSON]) -> TaskResult:
        """Submit the task as a run; visible to workers when the caller commits."""
        from runqueue.submission.submit import submit_in_transaction

        self.validate_task(task)
        payload = {
            "task_path": task.module_path,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
            "backend": self.alias,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": task.run_after.isoformat() if task.run_after else None,
        }
        sub = submit_in_transaction(
            kind=KIND,
            payload=payload,
            tenant=self.options.get("tenant", "default"),
            principal=f"tasks:{self.alias}",
            priority=runqueue_priority(task.priority, self.queue_class(task.queue_name)),
            scheduled_for=task.run_after,
            max_attempts=self.options.get("max_attempts"),
        )
        result = build_result(sub.run, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """Rebuild the TaskResult of a run of this backend, from any process."""
        from runqueue.models import Run

        try:
            run_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        run = Run.objects.filter(id=run_id, kind=KIND, payload__backend=self.alias).first()
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        return build_result(run, resolve_task(run.payload))

    def check(self, **kwargs: object) -> list[checks.CheckMessage]:
        from django.apps import apps

        hint = "See docs/handlers.md, 'Django Tasks backend'."
        messages: list[checks.CheckMessage] = []
        where = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("runqueue"):
            messages.append(
                checks.Error(
                    f"{where} uses RunQueueBackend, but 'runqueue' is not installed.",
                    hint="Add 'runqueue' to INSTALLED_APPS.",
                    id="runqueue.E010",
                )
            )
        unknown = sorted(set(self.options) - OPTION_KEYS)
        if unknown:
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS'] has unknown key(s): {', '.join(unknown)}.",
                    hint=f"Known: {', '.join(sorted(OPTION_KEYS))}.",
                    id="runqueue.E011",
                )
            )
        messages += self._check_options(where, hint)
        if not self.queues:
            messages.append(
                checks.Warning(
                    f"{where}['QUEUES'] is empty: any queue name is accepted and runs in the "
                    "'default' queue's class.",
                    hint="List the queues, e.g. ['default', 'interactive', 'async'].",
                    id="runqueue.W010",
                )
            )
        return messages

    def _check_options(self, where: str, hint: str) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = []
        from runqueue.models import PriorityClass

        classes = self.options.get("queue_classes", {})
        if not isinstance(classes, dict) or not all(
            isinstance(q, str) and c in PriorityClass.slugs() for q, c in classes.items()
        ):
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS']['queue_classes'] must map queue names to one of "
                    f"{', '.join(PriorityClass.slugs())}; got {classes!r}.",
                    hint=hint,
                    id="runqueue.E012",
                )
            )
            classes = {}
        mapped = default_queue_classes() | classes
        for queue in sorted(self.queues - set(mapped)):
            messages.append(
                checks.Error(
                    f"{where}: queue {queue!r} has no runqueue class.",
                    hint=f"Map it in OPTIONS['queue_classes'], e.g. {{{queue!r}: 'async'}}.",
                    id="runqueue.E013",
                )
            )
        attempts = self.options.get("max_attempts")
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS']['max_attempts'] must be a positive integer, "
                    f"got {attempts!r}.",
                    hint=hint,
                    id="runqueue.E014",
                )
            )
        tenant = self.options.get("tenant", "default")
        if not isinstance(tenant, str) or not 1 <= len(tenant) <= TENANT_MAX_LENGTH:
            messages.append(
                checks.Error(
                    f"{where}['OPTIONS']['tenant'] must be a 1-{TENANT_MAX_LENGTH} character "
                    "string, "
                    f"got {tenant!r}.",
                    hint=hint,
                    id="runqueue.E015",
                )
            )
        return messages


def resolve_task(payload: JSON) -> Task:
    """The Task a run names, refusing anything else (never run a stored path).

    Raises InvalidTaskPath (permanent) for a malformed path, one that does not
    import, or an object that is not a ``django.tasks.Task``.
    """
    path = payload.get("task_path") if isinstance(payload, dict) else None
    if not isinstance(path, str) or not _DOTTED.match(path):
        raise InvalidTaskPath(f"not a task path: {path!r}")
    try:
        obj = import_string(path)
    except ImportError as exc:
        raise InvalidTaskPath(f"task {path!r} does not import: {exc}") from exc
    if not isinstance(obj, Task):
        raise InvalidTaskPath(f"{path!r} is a {type(obj).__name__}, not a django.tasks Task")
    run_after = payload.get("run_after")
    try:
        return obj.using(
            priority=payload.get("priority"),
            queue_name=payload.get("queue_name"),
            backend=payload.get("backend"),
            run_after=dt.datetime.fromisoformat(run_after) if run_after else None,
        )
    except (InvalidTask, InvalidTaskBackend, TypeError, ValueError) as exc:
        raise InvalidTaskPath(f"task {path!r} cannot run as stored: {exc}") from exc


def build_result(run: Run, task: Task) -> TaskResult:
    """The TaskResult of a run: status, times, worker ids, errors, return value."""
    from runqueue import events
    from runqueue.models import EventLog

    rows = EventLog.objects.filter(run_id=run.id, type__in=(events.CLAIMED, TASK_ERROR))
    worker_ids: list[str] = []
    errors: list[TaskError] = []
    last_attempted_at = run.started_at
    for type_, data, created_at in rows.order_by("id").values_list("type", "data", "created_at"):
        if type_ == events.CLAIMED:
            worker_ids.append(str(data.get("owner", "")))
            last_attempted_at = created_at
        else:
            errors.append(
                TaskError(
                    exception_class_path=data["exception_class_path"],
                    traceback=data.get("traceback", ""),
                )
            )
    failure = run.failure or {}
    if run.status == "failed" and (not errors or failure.get("classification") == "lease_expired"):
        errors.append(
            TaskError(
                exception_class_path=_exception_path(TaskLost()),
                traceback=failure.get("traceback") or failure.get("message") or "",
            )
        )
    if run.status == "cancelled":
        errors.append(
            TaskError(exception_class_path=_exception_path(TaskCancelled()), traceback="")
        )
    result: TaskResult[..., JSON] = TaskResult(
        task=task,
        id=str(run.id),
        status=STATUS_MAP[run.status],
        enqueued_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        last_attempted_at=last_attempted_at,
        args=run.payload.get("args", []),
        kwargs=run.payload.get("kwargs", {}),
        backend=run.payload.get("backend", ""),
        errors=errors,
        worker_ids=worker_ids,
    )
    if run.status == "succeeded":
        object.__setattr__(result, "_return_value", run.result)
    return result


@handler(KIND)
def run_task(ctx: RunContext) -> JSON:
    """The django.tasks kind: resolve the Task, call it, report through signals.

    An exception is recorded as a ``task.error`` event and re-raised, so the
    runtime classifies it (TransientError retries, anything else fails).
    """
    from runqueue import leases

    try:
        task = resolve_task(ctx.payload)
    except InvalidTaskPath as exc:
        leases.append_event(ctx.lease, TASK_ERROR, _error_data(exc))
        raise
    result = build_result(ctx.run, task)
    sender = type(task.get_backend())
    task_started.send(sender=sender, task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        value = normalize_json(value)
    except Exception as exc:
        leases.append_event(ctx.lease, TASK_ERROR, _error_data(exc))
        result.errors.append(
            TaskError(exception_class_path=_exception_path(exc), traceback=_traceback(exc))
        )
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        task_finished.send(sender=sender, task_result=result)  # inside except: exc_info
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=sender, task_result=result)
    return value


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def _error_data(exc: BaseException) -> dict[str, str]:
    return {"exception_class_path": _exception_path(exc), "traceback": _traceback(exc)}
