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
