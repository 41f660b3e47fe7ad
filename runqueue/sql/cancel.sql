-- An operator's or a caller's hand on a run: cancel (and a tree's), pause and
-- resume, requeue of a dead letter.

-- name: cancel --
-- Cancel a non-terminal run (a pending turn too); the epoch bump fences a
-- worker still running it. A run with a parent counts in it
-- (runqueue_join): cancelling a child wakes a parent waiting for it. A run
-- in a session queues the session's next pending turn once no run of it is
-- active (runqueue_promote): cancelling the active run moves the line on,
-- cancelling a pending turn leaves it where it is.
WITH cancelled AS (
    UPDATE runqueue_run
       SET status = 'cancelled',
           lease_epoch = lease_epoch + 1,
           finished_at = now(),
           lease_owner = '',
           lease_token = NULL,
           lease_expires_at = NULL
     WHERE id = %(run_id)s
       AND status IN (
           -- include: live_statuses --
           )
    RETURNING id, lease_epoch, parent_id, tenant, session_id
)
SELECT c.id, c.lease_epoch,
       CASE WHEN c.parent_id IS NOT NULL
            THEN runqueue_join(ARRAY[c.parent_id], %(channel)s) END,
       CASE WHEN c.session_id IS NOT NULL
            THEN runqueue_promote(ARRAY[c.tenant], ARRAY[c.session_id], %(channel)s) END
  FROM cancelled c;

-- name: pause_runs --
-- Pause a run, and with %(tree)s every run below it (children, theirs, ...;
-- a finished run's live children are walked too): each live run not
-- paused yet gets paused_at. The claim steps over it (fragment due), the
-- start deadline service too (the deadline is frozen: a resume moves it on
-- by the time paused), and a running one is given back at its handler's
-- next step (told by a NOTIFY and by the heartbeat, fence_renew_many).
-- Nothing else moves: a waiting run keeps waiting and its wake-up queues
-- it, still paused. The rows paused: id, status, epoch.
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
-- Resume what pause_runs paused (the run, and with %(tree)s every run below
-- it): paused_at cleared, a start deadline moved on by the time the run was
-- paused. A run that ended while paused is resumed too (nothing to claim).
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
-- A cascading cancel's next level: the children of runs it has just walked
-- (cancelled, or finished before it), each non-terminal one cancelled, in
-- the same transaction, a statement per level so each level sees the
-- children committed before its parents' row locks were taken (a spawn
-- commits under its parent's lock, so no child is missed and none is made
-- after). Every child is returned, the cancelled with their new epoch: a
-- finished child may have children still running. Their parents are
-- terminal: no join to count. A child given a session (ctx.spawn's
-- session_id) queues that session's next pending turn (runqueue_promote).
WITH kids AS (
    SELECT id FROM runqueue_run WHERE parent_id = ANY(%(parent_ids)s::uuid[])
), cancelled AS (
    UPDATE runqueue_run
       SET status = 'cancelled',
           lease_epoch = lease_epoch + 1,
           finished_at = now(),
           lease_owner = '',
           lease_token = NULL,
           lease_expires_at = NULL
     WHERE id IN (SELECT id FROM kids)
       AND status IN (
           -- include: live_statuses --
           )
    RETURNING id, lease_epoch, tenant, session_id
), promoted AS (
    SELECT runqueue_promote(array_agg(c.tenant), array_agg(c.session_id), %(channel)s) AS n
      FROM cancelled c
     WHERE c.session_id IS NOT NULL
    HAVING count(*) > 0
)
SELECT k.id, c.lease_epoch FROM kids k LEFT JOIN cancelled c ON c.id = k.id
 WHERE (SELECT count(*) FROM promoted) >= 0;

-- name: operator_requeue --
-- An operator sends a dead-lettered run back to the queue: a fresh attempt
-- budget, due at once (scheduled_for = now(): the claim's wait counts from
-- here, not from creation), a new epoch. The failure moves to the event.
-- Its row lock held, the transaction counts again (requeue_recount, a later
-- statement) its own open children and its parent's.
UPDATE runqueue_run
   SET status = 'queued',
       lease_epoch = lease_epoch + 1,
       attempts = 0,
       scheduled_for = now(),
       finished_at = NULL,
       failure = NULL,
       lease_token = NULL
 WHERE id = %(run_id)s AND status = 'failed'
RETURNING id, lease_epoch, priority, parent_id;

-- name: requeue_recount --
-- After operator_requeue, in its transaction: the requeued run's open
-- children counted from their statuses (they may have ended while it was
-- dead: their joins left its count alone), and its parent's (the run is
-- open in it again), each under its row lock (runqueue_recount).
SELECT runqueue_recount(ARRAY[%(run_id)s::uuid, %(parent_id)s::uuid], %(channel)s);
