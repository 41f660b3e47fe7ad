"""Reads from a replica without one (the pair's tests are in
tests/topologies/test_replica_reads.py): the checks of READ_DATABASE and
its router, and what the router decides outside a read scope, where every
runqueue read and write is the primary's."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from runqueue import checks, reads
from runqueue.models import Run
from runqueue.reads.routing import ReadReplicaRouter

ROUTER = "runqueue.reads.routing.ReadReplicaRouter"


class EveryReadToAReplica:
    """A project's router such as Django's documentation shows."""

    def db_for_read(self, model: object, **hints: object) -> str:
        return "replica"


def _ids(**settings: object) -> list[str]:
    with override_settings(**settings):
        return [m.id for m in checks.check_read_database()]


def test_read_database_must_name_a_databases_alias() -> None:
    with override_settings(RUNQUEUE={"READ_DATABASE": "nope"}, DATABASE_ROUTERS=[ROUTER]):
        (error,) = checks.check_read_database()
    assert error.id == "runqueue.E016"
    assert error.msg == "RUNQUEUE['READ_DATABASE'] is 'nope', which is not a DATABASES alias."


def test_read_database_needs_the_router_listed_first() -> None:
    conf = {"READ_DATABASE": "default"}
    assert _ids(RUNQUEUE=conf, DATABASE_ROUTERS=[]) == ["runqueue.E017"]
    here = f"{__name__}.EveryReadToAReplica"
    assert _ids(RUNQUEUE=conf, DATABASE_ROUTERS=[here, ROUTER]) == ["runqueue.W007"]
    assert _ids(RUNQUEUE=conf, DATABASE_ROUTERS=[ROUTER, here]) == []
    assert _ids(RUNQUEUE={}, DATABASE_ROUTERS=[]) == []  # no replica: no router needed


@override_settings(RUNQUEUE={"READ_DATABASE": "replica"})
def test_outside_a_read_scope_runqueue_reads_and_writes_the_primary() -> None:
    router = ReadReplicaRouter()
    assert reads.current() is None and reads.read_alias() == "default"
    assert router.db_for_read(Run) == "default"
    assert router.db_for_read(User) is None  # not runqueue's: other routers decide
    assert router.db_for_write(Run) == "default"
    from_replica = Run()
    from_replica._state.db = "replica"
    assert router.db_for_read(Run, instance=from_replica) == "replica"  # its related rows
    assert router.db_for_write(Run, instance=from_replica) == "default"
    assert router.allow_migrate("replica", "runqueue") is False
    assert router.allow_migrate("default", "runqueue") is None


@override_settings(RUNQUEUE={"READ_DATABASE": "default"})
def test_the_default_database_named_as_replica_is_the_primary() -> None:
    with reads.replica_reads() as source:
        assert (source.alias, source.replica, source.notice()) == ("default", False, None)


@pytest.mark.parametrize(
    ("text", "number"), [(None, None), ("0/0", 0), ("16/B374D848", (0x16 << 32) + 0xB374D848)]
)
def test_a_wal_position_is_compared_as_a_number(text: str | None, number: int | None) -> None:
    assert reads.parse_lsn(text) == number
