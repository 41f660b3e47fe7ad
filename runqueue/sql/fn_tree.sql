-- A run's tree: the active and live statuses, the resume of a waiting run, the
-- fan-in (runqueue_join, runqueue_recount), the root.

-- fragment: active_statuses --
-- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
'queued', 'running', 'waiting_for_user', 'waiting'

-- fragment: live_statuses --
-- Live: not ended yet, a pending turn too (models.LIVE_STATUSES).
'queued', 'running', 'waiting_for_user', 'waiting', 'pending'

-- fragment: resume --
-- The resume of a waiting run (the end of a SET list, after its input and
-- timed_out; alias r): queued, due now, a new epoch, a fresh attempt
-- budget for the new turn, no wait and no lease.
status = 'queued',
lease_epoch = r.lease_epoch + 1,
attempts = 0,
scheduled_for = now(),
wait_reason = '',
wait_name = '',
wait_match = NULL,
waiting_since = NULL,
wait_until = NULL,
lease_owner = '',
lease_token = NULL,
lease_expires_at = NULL

-- fragment: lock_parents --
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
           AND r.status IN (
               -- include: active_statuses --
               )
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

-- fragment: open_children --
-- How many children of run r are open: the live partition's parent index.
(SELECT count(*)::integer
   FROM runqueue_run c
  WHERE c.parent_id = r.id
    AND c.status IN (
        -- include: active_statuses --
        ))

-- fragment: resume_joined --
-- Each run of p_parents that waits for its children and has none open is
-- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
WITH woken AS (
    UPDATE runqueue_run r
       SET input = NULL,
           timed_out = false,
           -- include: resume --
     WHERE r.id = ANY(p_parents)
       AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
    RETURNING r.id, r.lease_epoch
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
      FROM woken w
)
SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;

-- function: runqueue_join --
-- The fan-in, called by every statement that ends runs with a parent, with the parents' ids (a
-- repeat per child): each parent locked, its children_open lowered, resumed once when it waits
-- and none is open. Returns how many resumed (docs/decisions.md, "Sub-agents and durable waits").
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
    -- include: lock_parents --
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN (
           -- include: active_statuses --
           );
    -- include: resume_joined --
    RETURN resumed;
END;
$fn$;

-- function: runqueue_recount --
-- Count the open children of each run in p_parents again from their statuses, under its row
-- lock, and resume one waiting with none open: an operator's requeue, for the run and its
-- parent (docs/decisions/run-trees.md, "A dead letter requeued counts its children again").
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
    -- include: lock_parents --
    UPDATE runqueue_run r
       SET children_open =
           -- include: open_children --
     WHERE r.id = ANY(p_parents)
       AND r.status IN (
           -- include: active_statuses --
           );
    -- include: resume_joined --
    RETURN resumed;
END;
$fn$;

-- function: runqueue_tree_root --
-- A run's tree root and the root's session (ctx.record_usage, a fork's spend cap). SET jit =
-- off: over every partition the walk's cost passes jit_above_cost; PL/pgSQL keeps its plan
-- (docs/decisions/history.md, "The layout").
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
