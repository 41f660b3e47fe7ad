"""One SQL definition of a priority's class (issue 16): the class functions
of ``runqueue.sql.classes``, and ``runqueue_claim_capped`` reading them
instead of writing the class arithmetic out."""

import re
from collections.abc import Callable
from importlib import import_module

from django.db import migrations

# runqueue.sql.classes.functions() as rendered when this migration was
# written (tests/test_queries.py checks the functions against PriorityClass).
CLASS_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION runqueue_priority_class(priority integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT least(priority / 10, 2)$$;
CREATE OR REPLACE FUNCTION runqueue_priority_class_low(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 0 WHEN 1 THEN 10 WHEN 2 THEN 20 END$$;
CREATE OR REPLACE FUNCTION runqueue_priority_class_high(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 9 WHEN 1 THEN 19 WHEN 2 THEN 32767 END$$;
CREATE OR REPLACE FUNCTION runqueue_priority_classes()
    RETURNS TABLE (idx integer, low integer, high integer)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$VALUES (0, 0, 9), (1, 10, 19), (2, 20, 32767)$$;
"""

DROP_CLASS_FUNCTIONS = """
DROP FUNCTION runqueue_priority_classes();
DROP FUNCTION runqueue_priority_class_high(integer);
DROP FUNCTION runqueue_priority_class_low(integer);
DROP FUNCTION runqueue_priority_class(integer);
"""

_CONCURRENCY = import_module("runqueue.migrations.0004_concurrency")

# runqueue_claim_capped is 0004's walk with these changes, and no other: every
# piece of class arithmetic becomes a class function, and the three lists of
# (key, class) pairs stepped over, one per class, become one list of
# 'class:key' pairs, so the function no longer counts the classes. The same
# walk, the same locks, the same plans (the functions are inlined).
# Each change is (what 0004 wrote, what it is now, how many times), matched
# with any white space between words. The whole text: \sf runqueue_claim_capped.
CHANGES = [
    ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
    (
        "(then listed in blocked<class>)",
        "(then its 'class:key' is in blocked)",
        1,
    ),
    (
        "blocked0 text[] := '{}'; blocked1 text[] := '{}'; blocked2 text[] := '{}';",
        "blocked text[] := '{}';",
        1,
    ),
    (
        "least(q.priority / 10, 2) * 10",
        "runqueue_priority_class_low(runqueue_priority_class(q.priority))",
        2,
    ),
    ("least(q.priority / 10, 2)", "runqueue_priority_class(q.priority)", 2),
    (
        "BETWEEN greatest(c.cls * 10, p_min_priority)"
        " AND least(CASE c.cls WHEN 2 THEN 32767 ELSE c.cls * 10 + 9 END, p_max_priority)",
        "BETWEEN greatest(runqueue_priority_class_low(c.cls), p_min_priority)"
        " AND least(runqueue_priority_class_high(c.cls), p_max_priority)",
        1,
    ),
    (
        "keys.key <> ALL(CASE c.cls WHEN 0 THEN blocked0 WHEN 1 THEN blocked1 ELSE blocked2 END)",
        "(c.cls || ':' || keys.key) <> ALL(blocked)",
        1,
    ),
    (
        "cand.key = ANY(CASE cand.cls WHEN 0 THEN blocked0 WHEN 1 THEN blocked1"
        " ELSE blocked2 END)",
        "(cand.cls || ':' || cand.key) = ANY(blocked)",
        1,
    ),
    (
        "l.priority_class = cand.cls * 10",
        "l.priority_class = runqueue_priority_class_low(cand.cls)",
        1,
    ),
    (
        "BETWEEN cand.cls * 10 AND CASE cand.cls WHEN 2 THEN 32767 ELSE cand.cls * 10 + 9 END",
        "BETWEEN runqueue_priority_class_low(cand.cls) AND runqueue_priority_class_high(cand.cls)",
        2,
    ),
    (
        "IF cand.cls = 0 THEN blocked0 := blocked0 || cand.key;"
        " ELSIF cand.cls = 1 THEN blocked1 := blocked1 || cand.key;"
        " ELSE blocked2 := blocked2 || cand.key; END IF;",
        "blocked := blocked || pair;",
        1,
    ),
]


def _literal(new: str) -> Callable[[re.Match[str]], str]:
    """A replacement that inserts ``new`` as it is (no backslash escapes)."""
    return lambda _match: new


def _changed(text: str) -> str:
    for old, new, count in CHANGES:
        pattern = r"\s+".join(re.escape(word) for word in old.split())
        text, found = re.subn(pattern, _literal(new), text)
        if found != count:
            raise ValueError(f"{old!r} found {found} times in 0004's function, not {count}")
    return text


CLAIM_CAPPED = _changed(_CONCURRENCY.CLAIM_CAPPED)

PREVIOUS_CLAIM_CAPPED = _CONCURRENCY.CLAIM_CAPPED.replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
)


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0004_concurrency"),
    ]

    operations = [
        migrations.RunSQL(CLASS_FUNCTIONS, reverse_sql=DROP_CLASS_FUNCTIONS),
        migrations.RunSQL(CLAIM_CAPPED, reverse_sql=PREVIOUS_CLAIM_CAPPED),
    ]
