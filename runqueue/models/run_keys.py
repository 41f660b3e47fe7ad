"""The keys of the tables that record something of a run: one declaration
of how a row names its run.

None has a database constraint: PostgreSQL cannot reference the
partitioned runs table's id alone (migration 0009), so deletes cascade in
the ORM and retention drops a finished day with everything of its runs
(``runqueue.history.partitions``). A schedule's tick, which may name no
run, declares its own.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import models

from runqueue.models.runs import Run


def run_key(
    related_name: str, *, on_delete: Callable[..., None] = models.CASCADE, db_index: bool = True
) -> models.ForeignKey[Run, Run]:
    """A row's run: deleted with it unless ``on_delete`` says otherwise.
    ``db_index=False`` where the run needs no index of its own: the table's
    key or another of its indexes leads with it, or it is a view."""
    return models.ForeignKey(
        Run,
        on_delete=on_delete,
        related_name=related_name,
        db_constraint=False,
        db_index=db_index,
    )


def run_primary_key(related_name: str) -> models.OneToOneField[Run, Run]:
    """The run of a table with one row per run at most, as the row's key:
    deleted with it."""
    return models.OneToOneField(
        Run,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name=related_name,
        db_constraint=False,
    )
