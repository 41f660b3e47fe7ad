"""What the SQL writes in many places is written once, as a fragment
(runqueue/sql/__init__.py): the resume of a waiting run, the give-back of a
lease, and the active and live statuses. A statement or function that does
one of them includes its fragment; none spells it out."""

from __future__ import annotations

import re

from runqueue.models import ACTIVE_STATUSES, LIVE_STATUSES
from runqueue.sql import functions, queries, sources

_BLOCK = re.compile(r"^-- (name|function|fragment): ([a-z_]+) --$", re.MULTILINE)
#: A list of two or more quoted statuses, as an IN writes them.
_STATUS_LIST = re.compile(r"'[a-z_]+'(?:,\s*'[a-z_]+')+")


def _sources() -> str:
    return sources()


def _fragments() -> dict[str, str]:
    """Each fragment's own text as written (includes not put in)."""
    parts = _BLOCK.split(_sources())
    return {
        name: body
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)
        if kind == "fragment"
    }


def _sql_lines(text: str) -> list[str]:
    """The text's lines without comments, indentation or blank lines."""
    stripped = (line.strip() for line in text.splitlines())
    return [line for line in stripped if line and not line.startswith("--")]


def _texts() -> dict[str, str]:
    """Every statement and function as loaded, fragments put in."""
    return {**queries(), **functions()}


def _including(fragment: str) -> set[str]:
    """The statements and functions whose text holds ``fragment``'s lines
    in a row."""
    lines = _sql_lines(_fragments()[fragment])
    found = set()
    for name, text in _texts().items():
        body = _sql_lines(text)
        if any(body[i : i + len(lines)] == lines for i in range(len(body))):
            found.add(name)
    return found


def _writing(line: str) -> set[str]:
    """The statements and functions with ``line`` among their lines."""
    return {name for name, text in _texts().items() if line in _sql_lines(text)}


def test_the_resume_is_written_once() -> None:
    """Every resume of a waiting run (a child's end, a signal, a deadline,
    the user's input, an inbound event, a wait whose cause is there already)
    is the fragment resume, the same columns in the same order; nothing else
    clears a wait."""
    resumes = {
        "suspend",
        "resume_signal",
        "deliver_event",
        "resume_due",
        "deliver_input",
        "runqueue_join",
        "runqueue_recount",
    }
    assert _including("resume") == resumes
    for line in (
        "wait_reason = '',",
        "wait_match = NULL,",
        "waiting_since = NULL,",
        "wait_until = NULL,",
    ):
        assert _sources().count(line) == 1, line
        assert _writing(line) == resumes, line


def test_the_give_back_is_written_once() -> None:
    """A lease returned without its attempt spent (shutdown, a wait for a
    budget) is the fragment give_back: the attempt handed back only there."""
    assert _including("give_back") == {"fence_release", "fence_budget_wait"}
    assert _sources().count("attempts - 1") == 1
    assert _writing("attempts = greatest(r.attempts - 1, 0),") == {
        "fence_release",
        "fence_budget_wait",
    }


def test_the_active_and_live_statuses_are_written_once_as_the_models_say() -> None:
    """The fragments' lists are runqueue.models' ACTIVE_STATUSES and
    LIVE_STATUSES, and no other list of the sources is either of them."""
    fragments = _fragments()
    active = _STATUS_LIST.findall(fragments["active_statuses"])
    live = _STATUS_LIST.findall(fragments["live_statuses"])
    assert active == [", ".join(f"'{s}'" for s in ACTIVE_STATUSES)]
    assert live == [", ".join(f"'{s}'" for s in LIVE_STATUSES)]
    lists = [set(re.findall(r"'([a-z_]+)'", found)) for found in _STATUS_LIST.findall(_sources())]
    assert lists.count(set(ACTIVE_STATUSES)) == 1
    assert lists.count(set(LIVE_STATUSES)) == 1


def test_the_statuses_are_where_runs_count_as_active_or_live() -> None:
    """Which texts test a run against the active or the live statuses."""
    assert _including("active_statuses") == {
        "suspend",
        "runqueue_join",
        "runqueue_recount",
        "runqueue_promote",
    }
    assert _including("live_statuses") == {"cancel", "cancel_children", "pause_runs"}
