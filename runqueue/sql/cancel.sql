-- An operator's or a caller's hand on a run: cancel (and a tree's), pause and
-- resume, requeue of a dead letter.

-- fragment: cancel_update --
-- A cancel's UPDATE of runqueue_run, up to its WHERE: cancelled now, with a new epoch that fences
-- its worker, and no lease.
UPDATE runqueue_run
   SET status = 'cancelled',
       lease_epoch = lease_epoch + 1,
       finished_at = now(),
       lease_owner = '',
       lease_token = NULL,
       lease_expires_at = NULL,
       -- include: claim_cleared --

-- name: cancel --
-- Cancel a non-terminal run (a pending turn too); the epoch bump fences its worker. A child
-- counts in its parent (runqueue_join); a session's next pending turn is queued once none of
-- its runs is active (runqueue_promote). The row is locked first: a claim that commits while the
-- cancel waits is the one written out (claims_ended reads a fenced move's snapshot instead).
WITH held AS (
    SELECT * FROM runqueue_run
     WHERE id = %(run_id)s
       AND status IN (
           -- include: live_statuses --
           )
       FOR NO KEY UPDATE
), cancelled AS (
    -- include: cancel_update --
     WHERE id IN (SELECT h.id FROM held h)
       AND status IN (
           -- include: live_statuses --
           )
    RETURNING id, lease_epoch, parent_id, tenant, session_id
), ended AS (
    SELECT h.* FROM held h WHERE h.id IN (SELECT c.id FROM cancelled c) AND h.status = 'running'
),
-- include: claim_logged --
SELECT c.id, c.lease_epoch,
       CASE WHEN c.parent_id IS NOT NULL
            THEN runqueue_join(ARRAY[c.parent_id], %(channel)s) END,
       CASE WHEN c.session_id IS NOT NULL
            THEN runqueue_promote(ARRAY[c.tenant], ARRAY[c.session_id], %(channel)s) END
  FROM cancelled c;

-- name: pause_runs --
-- Pause a run, and with %(tree)s every live run below it; returns the rows paused. The claim and
-- the start deadline step over it, a running one is given back at its handler's next step.
-- Why: docs/decisions/run-trees.md, "Pausing one run".
WITH RECURSIVE tree(id) AS (
    SELECT %(run_id)s::uuid
    UNION
    SELECT r.id FROM runqueue_run r JOIN tree t ON r.parent_id = t.id
     WHERE %(tree)s
)
UPDATE runqueue_run r
   SET paused_at = now()
  FROM tree t
 WHERE r.id = t.id AND r.paused_at IS NULL
   AND r.status IN (
       -- include: live_statuses --
       )
RETURNING r.id, r.status, r.lease_epoch;

-- name: resume_runs --
-- Resume what pause_runs paused (with %(tree)s, every run below too): paused_at cleared, a
-- start deadline moved on by the time paused; a run that ended while paused is resumed too.
-- The rows resumed: id, status, epoch, priority, seconds paused.
WITH RECURSIVE tree(id) AS (
    SELECT %(run_id)s::uuid
    UNION
    SELECT r.id FROM runqueue_run r JOIN tree t ON r.parent_id = t.id
     WHERE %(tree)s
), held AS (
    SELECT r.id, r.paused_at
      FROM runqueue_run r JOIN tree t ON r.id = t.id
     WHERE r.paused_at IS NOT NULL
       FOR NO KEY UPDATE OF r
)
UPDATE runqueue_run r
   SET paused_at = NULL,
       start_by = r.start_by + (now() - h.paused_at)
  FROM held h
 WHERE r.id = h.id AND r.paused_at IS NOT NULL
RETURNING r.id, r.status, r.lease_epoch, r.priority,
          extract(epoch FROM now() - h.paused_at)::float8;

-- name: cancel_children --
-- A cascading cancel's next level: every child of the runs just walked, each live one cancelled
-- with a new epoch (its session's line moves). A statement per level sees each child committed
-- first: docs/decisions/run-trees.md, "Cancelling a tree, and lock order".
WITH kids AS (
    SELECT id FROM runqueue_run WHERE parent_id = ANY(%(parent_ids)s::uuid[])
), held AS (
    SELECT * FROM runqueue_run
     WHERE id IN (SELECT id FROM kids)
       AND status IN (
           -- include: live_statuses --
           )
       FOR NO KEY UPDATE
), cancelled AS (
    -- include: cancel_update --
     WHERE id IN (SELECT h.id FROM held h)
       AND status IN (
           -- include: live_statuses --
           )
    RETURNING id, lease_epoch, tenant, session_id
), ended AS (
    SELECT h.* FROM held h WHERE h.id IN (SELECT c.id FROM cancelled c) AND h.status = 'running'
),
-- include: claim_logged --
, promoted AS (
    SELECT runqueue_promote(array_agg(c.tenant), array_agg(c.session_id), %(channel)s) AS n
      FROM cancelled c
     WHERE c.session_id IS NOT NULL
    HAVING count(*) > 0
)
SELECT k.id, c.lease_epoch FROM kids k LEFT JOIN cancelled c ON c.id = k.id
 WHERE (SELECT count(*) FROM promoted) >= 0;

-- name: operator_requeue --
-- An operator sends a dead letter back to the queue: a fresh attempt budget, due now (the
-- claim's wait counts from here), a new epoch; the failure moves to the event. Then
-- requeue_recount, in the same transaction. A handler's failure left its claim on the row
-- (claim_held): written out here, as claims_ended does for a running run.
WITH moved AS (
    UPDATE runqueue_run
       SET status = 'queued',
           lease_epoch = lease_epoch + 1,
           attempts = 0,
           scheduled_for = now(),
           finished_at = NULL,
           failure = NULL,
           lease_owner = '',
           lease_token = NULL,
           -- include: claim_cleared --
     WHERE id = %(run_id)s AND status = 'failed'
    RETURNING id, lease_epoch, priority, parent_id
), ended AS (
    SELECT o.* FROM runqueue_run o
     WHERE o.id = %(run_id)s AND o.status = 'failed' AND EXISTS (SELECT FROM moved)
),
-- include: claim_logged --
SELECT * FROM moved;

-- name: requeue_recount --
-- After operator_requeue, in its transaction: the run's and its parent's open children counted
-- again from their statuses, under each row lock (runqueue_recount). Why:
-- docs/decisions/run-trees.md, "A dead letter requeued counts its children again".
SELECT runqueue_recount(ARRAY[%(run_id)s::uuid, %(parent_id)s::uuid], %(channel)s);
