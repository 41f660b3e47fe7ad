"""Real django.tasks ``@task`` functions the backend tests enqueue and run."""

from __future__ import annotations

from django.tasks import TaskContext, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="interactive", priority=100)
def urgent() -> str:
    return "urgent"


@task
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def attempt_of(context: TaskContext) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
async def double(x: int) -> int:
    return x * 2


@task
def not_json() -> object:
    return object()


@task
def pair() -> tuple:
    return (1, "two")


NOT_A_TASK = "a string, not a Task"


def plain_function() -> str:
    return "never run by the backend"
