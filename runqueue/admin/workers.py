"""Workers, read-only: which runworker processes exist and when each was seen."""

from __future__ import annotations

import datetime as dt

from django.contrib import admin
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from runqueue.admin import display
from runqueue.admin.guard import GuardedAdmin
from runqueue.admin.permissions import NoBulkDelete
from runqueue.conf import get_settings
from runqueue.db import db_now
from runqueue.models import Run, RunStatus, Worker
from runqueue.reads import versions


@admin.register(Worker)
class WorkerAdmin(NoBulkDelete, GuardedAdmin):
    list_display = [
        "id",
        "hostname",
        "pid",
        "slot_groups",
        "held",
        "held_by_cancelled",
        "live",
        "last_seen",
        "started",
    ]
    list_filter = ["stopped_at"]
    search_fields = ["=id", "hostname"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        # The database's clock, read with the rows: a worker's times are
        # the database's, so liveness and ages never mix in this host's clock.
        return super().get_queryset(request).annotate(db_now=Now())

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False  # workers write their own rows

    @admin.display(boolean=True, description="live")
    def live(self, worker: Worker) -> bool:
        stale = dt.timedelta(seconds=3 * get_settings().HEARTBEAT_SECONDS)
        return worker.stopped_at is None and worker.last_seen_at >= _now(worker) - stale

    @admin.display(description="held leases")
    def held(self, worker: Worker) -> int:
        """Runs this worker holds a lease on: running, or claimed ahead of a slot."""
        return Run.objects.filter(
            status=RunStatus.RUNNING, lease_owner__startswith=f"{worker.id}/"
        ).count()

    @admin.display(description="slots")
    def slot_groups(self, worker: Worker) -> SafeString:
        """{"interactive": 2, "async,maintenance": 1} -> "interactive 2 · async,maintenance 1",
        its kinds and versions in the title: a column of their own pushed the
        list past a 1366 px screen (the dashboard's "Kinds and versions" table
        lists the workers that serve each kind)."""
        slots = " · ".join(f"{label} {n}" for label, n in (worker.slots or {}).items()) or "-"
        return format_html(
            '<span title="kinds: {}">{}</span>', self.kinds_display(worker) or "-", slots
        )

    @admin.display(description="kinds and versions")
    def kinds_display(self, worker: Worker) -> str:
        """What its claims take: "a v1,v2 (1 to 2) · b v1" (1 to 2: a run
        pinned to 1 moves to 2 between turns)."""
        return versions.worker_kinds(worker.kinds)

    @admin.display(description="started", ordering="started_at")
    def started(self, worker: Worker) -> str:
        return display.age(worker.started_at, _now(worker)) + " ago"

    @admin.display(description="last seen", ordering="last_seen_at")
    def last_seen(self, worker: Worker) -> str:
        return display.age(worker.last_seen_at, _now(worker)) + " ago"

    @admin.display(description="stopping")
    def held_by_cancelled(self, worker: Worker) -> str:
        """Slots whose handler was told to stop (cancelled, lost, shutdown) and
        has not returned: which run, why, and for how long (as of the worker's
        last report)."""
        if worker.stopped_at is not None or not worker.cancelled_slots:
            return "-"
        now = _now(worker)
        return "; ".join(_held(slot, worker.last_seen_at, now) for slot in worker.cancelled_slots)


def _now(worker: Worker) -> dt.datetime:
    """The database's time the row was read at (``get_queryset``)."""
    return getattr(worker, "db_now", None) or db_now()


def _held(slot: dict[str, object], reported_at: dt.datetime, now: dt.datetime) -> str:
    """A slot held by a cancelled run, for how long: as reported, plus the
    time since the report (both on the database's clock)."""
    held = slot.get("held_seconds")
    age = (
        display.duration(dt.timedelta(seconds=float(held)) + (now - reported_at))
        if isinstance(held, int | float)
        else "?"
    )
    return f"{slot.get('group')} slot: run {slot.get('run_id')} ({slot.get('reason')}) for {age}"
