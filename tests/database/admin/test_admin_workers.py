"""The admin's worker list counts each worker's held leases (running runs,
claimed ahead ones included) from the runs themselves."""

from __future__ import annotations

import pytest
from django.contrib import admin

import runqueue
from runqueue import leases
from runqueue.models import Worker

pytestmark = pytest.mark.django_db


def test_held_leases_are_counted_per_worker() -> None:
    for _ in range(3):
        runqueue.submit(kind="k")
    leases.claim("W/async", limit=2)
    leases.claim("W2/async", limit=1)
    model_admin = admin.site._registry[Worker]
    w = Worker.objects.create(id="W", hostname="h", pid=1)
    w2 = Worker.objects.create(id="W2", hostname="h", pid=2)
    other = Worker.objects.create(id="W22", hostname="h", pid=3)  # not a prefix match
    assert [model_admin.held(x) for x in (w, w2, other)] == [2, 1, 0]


def test_the_worker_page_shows_slots_held_by_cancelled_runs(admin_client) -> None:
    """A handler told to stop that has not returned: which run holds which
    slot, why, and for how long, as the worker last reported it."""
    Worker.objects.create(
        id="W",
        hostname="h",
        pid=1,
        cancelled_slots=[
            {"run_id": "1b2c", "group": "interactive", "reason": "cancelled", "held_seconds": 42}
        ],
    )
    Worker.objects.create(id="W2", hostname="h", pid=2)
    model_admin = admin.site._registry[Worker]
    assert model_admin.held_by_cancelled(Worker.objects.get(id="W2")) == "-"
    text = model_admin.held_by_cancelled(Worker.objects.get(id="W"))
    assert text.startswith("interactive slot: run 1b2c (cancelled) for 4")
    page = admin_client.get("/admin/runqueue/worker/")
    assert page.status_code == 200
    assert "run 1b2c (cancelled)" in page.content.decode()


def test_the_worker_list_names_its_kinds_and_versions_in_the_slots_title(admin_client) -> None:
    Worker.objects.create(
        id="W-kinds",
        hostname="h",
        pid=1,
        slots={"async": 2},
        kinds={"demo.turn": {"1": [], "2": [1]}},
    )
    page = admin_client.get("/admin/runqueue/worker/").content.decode()
    assert 'title="kinds: demo.turn' in page and ">async 2</span>" in page
