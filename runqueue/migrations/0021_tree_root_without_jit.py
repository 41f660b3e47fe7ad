"""The walk up a run's parents to its tree's root (ctx.record_usage, a
fork's spend cap) as a function planned without JIT: runqueue_tree_root.
Over every partition of months of history the walk's estimated cost
passed jit_above_cost, and compiling it took ~400 ms of a run page and of
each lease that recorded usage (docs/performance.md). The statement
itself was a query (usage_root), so nothing else is replaced.

FUNCTIONS is functions.sql's text of the function as it was when written
(a migration is history; see 0006_function_source).
"""

from django.db import migrations

FUNCTIONS = r"""
-- A run's tree root (the last ancestor found up its parents, itself for a
-- root) and the root's session: ctx.record_usage's tree, a fork's spend
-- cap. One primary-key probe per level, but over every partition of the
-- runs, so with months of history the plan's estimated cost passes
-- jit_above_cost and PostgreSQL would compile it (~400 ms at 2,000,000 runs)
-- to run a walk that takes a millisecond: SET jit = off, for this walk only.
-- PL/pgSQL so a session keeps the plan: planning the walk over the
-- partitions costs ~10 ms, more than running it.
CREATE OR REPLACE FUNCTION runqueue_tree_root(p_run uuid)
RETURNS TABLE (id uuid, session_id text)
LANGUAGE plpgsql STABLE
SET jit = off
AS $fn$
BEGIN
RETURN QUERY
WITH RECURSIVE up(id, parent_id, session_id, depth) AS (
    SELECT r.id, r.parent_id, r.session_id, 0
      FROM runqueue_run r
     WHERE r.id = p_run
    UNION ALL
    SELECT r.id, r.parent_id, r.session_id, u.depth + 1
      FROM up u
      JOIN runqueue_run r ON r.id = u.parent_id
     WHERE u.depth < 10000
)
SELECT up.id, up.session_id::text FROM up ORDER BY up.depth DESC LIMIT 1;
END
$fn$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0020_resume_once"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, reverse_sql="DROP FUNCTION runqueue_tree_root(uuid)"),
    ]
