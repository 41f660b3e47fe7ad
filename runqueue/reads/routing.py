"""The database router of reads from a replica: add
``"runqueue.reads.routing.ReadReplicaRouter"`` to ``DATABASE_ROUTERS``, first,
with ``RUNQUEUE["READ_DATABASE"]`` naming the replica's alias.

It routes runqueue's models only. Their reads go to the replica inside
``runqueue.reads.replica_reads()`` (the console's lists and dashboard,
``/metrics``, the API's event, step and session reads) and to the primary
everywhere else, even under a project's router that sends every read to a
replica: a worker, the fence and a submission read what they just wrote.
Their writes always go to the primary. docs/decisions/schedules-webhooks.md, "Reads from a
replica".
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model

from runqueue import reads
from runqueue.conf import get_settings

APP_LABEL = "runqueue"


def _ours(model: type[Model] | Model) -> bool:
    return model._meta.app_label == APP_LABEL


def _read_from(instance: Model | None) -> str | None:
    state = getattr(instance, "_state", None)
    return getattr(state, "db", None)


class ReadReplicaRouter:
    """Runqueue's reads to the replica inside a read scope, all else to the primary."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        if not _ours(model):
            return None
        # A related read follows its row: one page, one server.
        return _read_from(hints.get("instance")) or reads.read_alias()

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        if not _ours(model):
            return None
        db = _read_from(hints.get("instance"))
        if db is None or db == get_settings().READ_DATABASE:
            return DEFAULT_DB_ALIAS  # a row read from the replica is written on the primary
        return db

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        """A row read from the replica and one from the primary are the same data."""
        if not (_ours(obj1) and _ours(obj2)):
            return None
        same = {DEFAULT_DB_ALIAS, get_settings().READ_DATABASE}
        return True if {_read_from(obj1), _read_from(obj2)} <= same else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        """Never migrate the replica: it replays the primary's schema."""
        replica = get_settings().READ_DATABASE
        if app_label == APP_LABEL and db != DEFAULT_DB_ALIAS and db == replica:
            return False
        return None
