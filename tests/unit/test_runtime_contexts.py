"""The sync and async handler contexts offer the same calls: a handler
moved from ``def`` to ``async def`` keeps every call it makes, with the same
parameters, only awaited. The deliberate differences are listed here."""

from __future__ import annotations

import inspect
import re

from runqueue.runtime import AsyncRunContext, RunContext

#: On the sync context only: the steps of a tool call, which the async
#: context runs on a database thread between its awaits (not handler calls).
SYNC_ONLY = {"tool_begin", "tool_done", "tool_failed", "tool_interrupted"}
#: Properties of the async context that are instance attributes of the
#: sync one (set in ``__init__``): the same names on both contexts.
ASYNC_PROPERTIES_FOR_SYNC_ATTRIBUTES = {"lease", "state"}
#: Parameters whose types differ on purpose: an async handler's tool may be
#: ``async def`` too.
OTHER_TYPES = {("invoke_tool", "fn")}

_COROUTINE = re.compile(r"^Coroutine\[Any, Any, (.*)\]$")


def _public(cls: type) -> dict[str, object]:
    """The public members of ``cls`` and its bases (``RunContext``'s parts
    are mixins), the nearest definition winning."""
    return {
        name: value
        for base in reversed(cls.__mro__[:-1])
        for name, value in vars(base).items()
        if not name.startswith("_")
    }


def _awaited(annotation: object) -> object:
    """A plain method's ``Coroutine[Any, Any, X]`` as the X it gives when awaited."""
    if isinstance(annotation, str) and (match := _COROUTINE.match(annotation)):
        return match.group(1)
    return annotation


def _shape(method: object, name: str) -> list[tuple[object, ...]]:
    """Parameters (name, kind, default, type) and the awaited return type."""
    signature = inspect.signature(method)  # type: ignore[arg-type]
    parameters = [
        (
            p.name,
            p.kind,
            p.default,
            None if (name, p.name) in OTHER_TYPES else p.annotation,
        )
        for p in signature.parameters.values()
    ]
    return [*parameters, ("return", _awaited(signature.return_annotation))]


def test_both_contexts_have_the_same_calls_but_the_listed_exceptions() -> None:
    sync, asynchronous = _public(RunContext), _public(AsyncRunContext)
    assert set(sync) - set(asynchronous) == SYNC_ONLY
    assert set(asynchronous) - set(sync) == ASYNC_PROPERTIES_FOR_SYNC_ATTRIBUTES


def test_a_property_on_one_is_a_property_on_the_other() -> None:
    sync, asynchronous = _public(RunContext), _public(AsyncRunContext)
    for name in set(sync) & set(asynchronous):
        assert isinstance(sync[name], property) == isinstance(asynchronous[name], property), name


def test_the_same_calls_take_the_same_parameters_and_give_the_same_types() -> None:
    sync, asynchronous = _public(RunContext), _public(AsyncRunContext)
    methods = sorted(
        name
        for name in set(sync) & set(asynchronous)
        if inspect.isfunction(sync[name]) and inspect.isfunction(asynchronous[name])
    )
    assert "spawn" in methods and "invoke_tool" in methods  # the walk reads methods
    for name in methods:
        assert _shape(sync[name], name) == _shape(asynchronous[name], name), name
