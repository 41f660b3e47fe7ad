"""Run objects built from what the database returned, without a query:
a claim's raw rows and the runs a submit or a spawn inserted. One place,
so both read a row as ``Run.objects.get`` would."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cache

from django.db import connection
from django.db.models import Field
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from runqueue.models.runs import Run


@cache
def _loaders(names: tuple[str, ...]) -> list[tuple[int, str, tuple[Callable[..., object], ...]]]:
    """Per field of a claimed row, in the model's field order (``from_db``
    expects it; the table's column order differs once a migration added a
    column): its column's position, its attname and the converters Django
    applies to values read from the database (JSON)."""
    position = {name: index for index, name in enumerate(names)}
    loaders = []
    for field in Run._meta.concrete_fields:
        index = position.get(field.column) if field.column else None
        if index is None:
            continue
        col = field.get_col(Run._meta.db_table)
        converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        loaders.append((index, field.attname, tuple(converters)))
    return loaders


def run_from_row(names: Sequence[str], row: tuple) -> Run:
    """A Run from a raw row of ``runqueue_run`` (what ``raw()`` does), extra
    columns ignored: the claim's rows."""
    loaders = _loaders(tuple(names))
    values = []
    for index, _attname, converters in loaders:
        value = row[index]
        for convert in converters:
            value = convert(value, None, connection)
        values.append(value)
    return _built([attname for _i, attname, _c in loaders], values)


def inserted_runs(given: Iterable[dict[str, object]]) -> list[Run]:
    """The Runs an insert wrote, each with its values (by attname) and
    every other column as the model's default makes it (status queued,
    epoch 0, ...), as the insert statement does."""
    names = _defaults()[0]
    if pre_init.has_listeners(Run) or post_init.has_listeners(Run):
        return [_built(names, [row[name] for name in names]) for row in _rows(given)]
    return [_instance(row) for row in _rows(given)]


def _rows(given: Iterable[dict[str, object]]) -> Iterator[dict[str, object]]:
    """Each run's values over the defaults: every attname once."""
    _names, constant, per_run = _defaults()
    for values in given:
        row = constant | values
        for field in per_run:
            if field.attname not in values:
                row[field.attname] = field.get_default()
        yield row


def _built(names: Sequence[str], values: Sequence[object]) -> Run:
    """What ``Run.from_db`` makes, without ``Model.__init__``'s walk of the
    fields (a fifth of a bulk submit's CPU, and of a claim's per run): the
    values go straight into the instance's dict, as ``__init__`` puts them
    (no field of Run has a setter that does more on a new instance). A
    project that listens to Run's pre_init or post_init gets ``from_db``."""
    if pre_init.has_listeners(Run) or post_init.has_listeners(Run):
        return Run.from_db(connection.alias, list(names), list(values))
    return _instance(zip(names, values, strict=True))


def _instance(fields: Mapping[str, object] | Iterable[tuple[str, object]]) -> Run:
    """A saved Run of the default connection's database holding ``fields``
    (every attname, a mapping or pairs), as ``from_db`` leaves one."""
    run = Run.__new__(Run)
    state = ModelState()
    state.adding = False
    state.db = connection.alias
    run.__dict__.update(fields)
    run._state = state
    return run


@cache
def _defaults() -> tuple[list[str], dict[str, object], list[Field]]:
    """The run's columns, the defaults every new run shares (immutable:
    text, numbers, None), and the fields whose default is made per run (a
    callable's, or a mutable one, so no two runs share it): built once, as
    asking every field for its default per run was a fifth of a bulk
    submit's CPU."""
    fields = Run._meta.concrete_fields
    constant: dict[str, object] = {}
    per_run: list[Field] = []
    for field in fields:
        default = field.default if field.has_default() else None
        if callable(default) or isinstance(default, dict | list | set):
            per_run.append(field)
        else:
            constant[field.attname] = field.get_default()
    return [f.attname for f in fields], constant, per_run
