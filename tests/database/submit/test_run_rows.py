"""A Run built from what the database returned (a claim's row, a submit's
insert) is the Run ``Run.objects.get`` reads: the same field values, a
saved instance of the default database."""

from __future__ import annotations

import pytest
from django.db.models.signals import post_init

import runqueue
from runqueue import leases
from runqueue.models import Run


def _fields(run: Run) -> dict[str, object]:
    return {f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields}


def _same_as_read(run: Run) -> None:
    read = Run.objects.get(id=run.id)
    assert _fields(run) == _fields(read)
    assert (run._state.adding, run._state.db) == (False, "default")
    assert set(run.__dict__) - {"_state"} == set(read.__dict__) - {"_state"}


@pytest.mark.django_db
def test_submitted_and_claimed_runs_are_the_runs_the_database_holds() -> None:
    made = runqueue.submit_many(
        [
            runqueue.SubmitRequest(kind="test.record", payload={"n": n}, session_id=f"s{n}")
            for n in range(3)
        ]
    )
    for submission in made:
        _same_as_read(submission.run)
    lease = leases.claim_one("w", leases.ALL_CLASSES)
    assert lease is not None
    _same_as_read(lease.run)
    lease.run.priority = 5  # an ordinary instance: fields set, saved, read back
    lease.run.save(update_fields=["priority"])
    assert Run.objects.get(id=lease.run.id).priority == 5


@pytest.mark.django_db
def test_a_project_listening_to_runs_post_init_hears_every_built_run() -> None:
    heard: list[object] = []

    def listen(sender: type, instance: Run, **kwargs: object) -> None:
        heard.append(instance.id)

    post_init.connect(listen, sender=Run)
    try:
        made = runqueue.submit(kind="test.record", payload={}).run
    finally:
        post_init.disconnect(listen, sender=Run)
    assert made.id in heard
