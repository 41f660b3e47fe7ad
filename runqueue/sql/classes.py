"""The SQL functions that classify a priority, rendered from ``PriorityClass``.

Statements (``runqueue/sql/*.sql``, ``runqueue_claim_capped``) call these
instead of writing the class arithmetic out, so the database and the ORM read one rule.
Each is ``LANGUAGE sql IMMUTABLE`` with a one-line body and no ``STRICT`` or
``SET``: the planner inlines it, and a statement plans exactly as it would
with the expression written in place (an index condition stays one).

Their text lives in ``fn_classes.sql`` (each other function runqueue installs
in an ``fn_*.sql`` of its own), and a migration installs a frozen copy of it.
``tests/database/sql/test_queries.py`` checks the database's functions (which
``tests/database/sql/test_functions.py`` checks against the file) against what
``functions()`` renders from ``PriorityClass``: a change to the classes
fails there until ``fn_classes.sql`` says it and a new migration installs it.
"""

from __future__ import annotations

from runqueue.models import PriorityClass

_OPTIONS = "LANGUAGE sql IMMUTABLE PARALLEL SAFE"


def functions() -> str:
    """``CREATE OR REPLACE`` statements for the class functions, from ``PriorityClass``.

    - ``runqueue_priority_class(priority)``: the index of a priority's class;
    - ``runqueue_priority_class_low(idx)`` / ``_high(idx)``: the inclusive
      bounds of the class at ``idx`` (``low`` is the class's value, as
      ``ConcurrencyLimit`` and ``PausedKind`` store it); NULL for no class;
    - ``runqueue_priority_classes()``: every class as (idx, low, high), in order.
    """
    members = list(PriorityClass)
    low = " ".join(f"WHEN {c.index} THEN {c.bounds[0]}" for c in members)
    high = " ".join(f"WHEN {c.index} THEN {c.bounds[1]}" for c in members)
    rows = ", ".join(f"({c.index}, {c.bounds[0]}, {c.bounds[1]})" for c in members)
    return (
        "CREATE OR REPLACE FUNCTION runqueue_priority_class(priority integer) RETURNS integer\n"
        f"    {_OPTIONS}\n"
        f"    AS $$SELECT {PriorityClass.sql_index('priority')}$$;\n"
        "CREATE OR REPLACE FUNCTION runqueue_priority_class_low(idx integer) RETURNS integer\n"
        f"    {_OPTIONS}\n"
        f"    AS $$SELECT CASE idx {low} END$$;\n"
        "CREATE OR REPLACE FUNCTION runqueue_priority_class_high(idx integer) RETURNS integer\n"
        f"    {_OPTIONS}\n"
        f"    AS $$SELECT CASE idx {high} END$$;\n"
        "CREATE OR REPLACE FUNCTION runqueue_priority_classes()\n"
        "    RETURNS TABLE (idx integer, low integer, high integer)\n"
        f"    {_OPTIONS}\n"
        f"    AS $$VALUES {rows}$$;\n"
    )
