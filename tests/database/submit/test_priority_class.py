"""PriorityClass is the one home of class arithmetic: what the rest of runqueue
reads (slug, index, bounds, the maximum, the SQL and ORM expressions) agrees
with itself for every priority a run can have."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import IntegerField, Value

from runqueue.models import PRIORITY_MAX, PriorityClass, Run
from tests.database.factories import RunFactory

EVERY_PRIORITY = range(PRIORITY_MAX + 1)


def test_every_priority_falls_in_exactly_one_class_and_of_agrees() -> None:
    for priority in EVERY_PRIORITY:
        holders = [c for c in PriorityClass if c.bounds[0] <= priority <= c.bounds[1]]
        assert holders == [PriorityClass.of(priority)], priority


def test_bounds_tile_the_priorities_in_class_order() -> None:
    classes = list(PriorityClass)
    assert classes[0].bounds[0] == 0
    assert classes[-1].bounds[1] == PRIORITY_MAX
    for lower, upper in zip(classes, classes[1:], strict=False):
        assert lower.bounds[1] + 1 == upper.bounds[0]
    for cls in classes:
        assert cls.bounds[0] == int(cls)  # a class's value is its lowest priority


def test_index_is_the_place_in_class_order() -> None:
    for position, cls in enumerate(PriorityClass):
        assert cls.index == position
        assert PriorityClass.by_index(position) is cls


def test_slugs_round_trip() -> None:
    assert PriorityClass.slugs() == ("interactive", "async", "maintenance")
    for cls in PriorityClass:
        assert PriorityClass.from_slug(cls.slug) is cls
    with pytest.raises(ValueError, match="unknown priority class 'urgent'"):
        PriorityClass.from_slug("urgent")


@pytest.mark.parametrize("priority", [-1, PRIORITY_MAX + 1])
def test_of_refuses_priorities_outside_the_column(priority: int) -> None:
    with pytest.raises(ValueError, match=f"priority must be between 0 and {PRIORITY_MAX}"):
        PriorityClass.of(priority)


@pytest.mark.django_db
def test_sql_index_agrees_with_of() -> None:
    sql = f"SELECT p, {PriorityClass.sql_index('p')} FROM generate_series(0, %s) AS p"
    with connection.cursor() as cursor:
        cursor.execute(sql, [PRIORITY_MAX])
        rows = cursor.fetchall()
    assert len(rows) == PRIORITY_MAX + 1
    assert all(index == PriorityClass.of(p).index for p, index in rows)


@pytest.mark.django_db
def test_orm_index_agrees_with_of() -> None:
    edges = sorted({p for c in PriorityClass for p in c.bounds})
    for priority in edges:
        RunFactory(priority=priority)
    runs = Run.objects.annotate(ci=PriorityClass.orm_index("priority"))
    assert {r.priority: r.ci for r in runs} == {p: PriorityClass.of(p).index for p in edges}
    # An expression, not only a field name (the dashboard reads event data).
    one = Value(PRIORITY_MAX, output_field=IntegerField())
    top = Run.objects.annotate(ci=PriorityClass.orm_index(one)).values_list("ci", flat=True)
    assert set(top) == {PriorityClass.of(PRIORITY_MAX).index}
