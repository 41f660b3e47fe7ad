"""The fan-in across a dead letter (docs/decisions.md, "Sub-agents and
durable waits", "Fan-in"): runqueue_join locks every parent it is given,
dead-lettered ones too, before it counts; runqueue_recount counts a run's
open children again from their statuses, under its row lock, for an
operator's requeue.

FUNCTIONS is functions.sql's runqueue_join and runqueue_recount as they
were when written (a migration is history; see 0006_function_source).
"""

from importlib import import_module

from django.db import migrations

_PREVIOUS = import_module("runqueue.migrations.0012_subagents")

FUNCTIONS = r"""
-- The fan-in (docs/decisions.md, "Sub-agents and durable waits"), called by
-- every statement that makes runs with a parent terminal (a finish, a dead
-- letter, a cancel), in that statement, with the parents' ids: one per
-- child, repeats counted. Each parent is locked first, live or dead
-- (lock_parents); then each live parent's children_open goes down, so
-- children ending at once count one after the other; a parent waiting for
-- its children whose count reaches 0 is queued again here (resumed, a new
-- epoch, run.resumed), exactly once: its wait begins only under the same
-- row lock and, if no child is open then, resumes at once instead. A dead
-- letter's count is left alone, but locked: its requeue locks it before it
-- counts again (runqueue_recount), so a child's end is either committed
-- before that count or counted after it, never neither. A parent moved
-- between partitions while this waited for its lock (it finished, or was
-- requeued) fails the statement with 40001, nothing written: the caller
-- runs it again. VOLATILE: each statement inside sees the rows as they are
-- when its locks are held. Returns how many parents resumed; each resume
-- NOTIFYs p_channel so idle workers claim it at once.
CREATE OR REPLACE FUNCTION runqueue_join(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    IF p_parents IS NULL OR cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Every run of p_parents locked, in id order, live or dead-lettered (a dead
    -- letter may be requeued; succeeded and cancelled runs never change): the
    -- live ones first, from the live partition alone, then, only if some were
    -- not there, the dead letters among the others (a probe of every finished
    -- day). A dead letter requeued between the two is live and unlocked here;
    -- the count's UPDATE locks it.
    SELECT array_agg(l.id) INTO held
      FROM (SELECT r.id
              FROM runqueue_run r
             WHERE r.id = ANY(p_parents)
               AND r.status IN ('queued', 'running', 'waiting_for_user', 'waiting')
             ORDER BY r.id
               FOR NO KEY UPDATE) AS l;
    IF coalesce(cardinality(held), 0)
       < (SELECT count(DISTINCT p.id) FROM unnest(p_parents) AS p(id) WHERE p.id IS NOT NULL) THEN
        PERFORM 1
           FROM runqueue_run r
          WHERE r.id = ANY(p_parents) AND r.id <> ALL(coalesce(held, '{}'))
            AND r.status = 'failed'
          ORDER BY r.id
            FOR NO KEY UPDATE;
    END IF;
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN ('queued', 'running', 'waiting_for_user', 'waiting');
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               input = NULL,
               timed_out = false,
               wait_reason = '',
               wait_name = '',
               waiting_since = NULL,
               wait_until = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$fn$;

-- Count the open children of each run in p_parents again, from their
-- statuses (open_children), under its row lock (lock_parents), and resume
-- one that waits for its children and has none open (resume_joined): an
-- operator's requeue calls it, after its own statement, for the requeued
-- run (its children may have ended while it was dead, and their joins left
-- its count alone) and for its parent (the run is open in it again). The
-- count is read in a statement after the lock, so it holds every child
-- transition committed before the lock; one not committed yet (its join
-- waits for this lock) counts in the result after. Terminal runs are left
-- alone. Returns how many resumed.
CREATE OR REPLACE FUNCTION runqueue_recount(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    p_parents := array_remove(p_parents, NULL);
    IF cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Every run of p_parents locked, in id order, live or dead-lettered (a dead
    -- letter may be requeued; succeeded and cancelled runs never change): the
    -- live ones first, from the live partition alone, then, only if some were
    -- not there, the dead letters among the others (a probe of every finished
    -- day). A dead letter requeued between the two is live and unlocked here;
    -- the count's UPDATE locks it.
    SELECT array_agg(l.id) INTO held
      FROM (SELECT r.id
              FROM runqueue_run r
             WHERE r.id = ANY(p_parents)
               AND r.status IN ('queued', 'running', 'waiting_for_user', 'waiting')
             ORDER BY r.id
               FOR NO KEY UPDATE) AS l;
    IF coalesce(cardinality(held), 0)
       < (SELECT count(DISTINCT p.id) FROM unnest(p_parents) AS p(id) WHERE p.id IS NOT NULL) THEN
        PERFORM 1
           FROM runqueue_run r
          WHERE r.id = ANY(p_parents) AND r.id <> ALL(coalesce(held, '{}'))
            AND r.status = 'failed'
          ORDER BY r.id
            FOR NO KEY UPDATE;
    END IF;
    UPDATE runqueue_run r
       SET children_open =
           -- How many children of run r are open: the live partition's parent index.
           (SELECT count(*)::integer
              FROM runqueue_run c
             WHERE c.parent_id = r.id
               AND c.status IN ('queued', 'running', 'waiting_for_user', 'waiting'))
     WHERE r.id = ANY(p_parents)
       AND r.status IN ('queued', 'running', 'waiting_for_user', 'waiting');
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               input = NULL,
               timed_out = false,
               wait_reason = '',
               wait_name = '',
               waiting_since = NULL,
               wait_until = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$fn$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0013_budget_refunds"),
    ]
    operations = [
        migrations.RunSQL(
            FUNCTIONS,
            reverse_sql=[
                "DROP FUNCTION runqueue_recount(uuid[], text)",
                _PREVIOUS.FUNCTIONS,
            ],
        ),
    ]
