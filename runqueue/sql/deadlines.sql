-- The deadline service: waits whose deadline passed, and runs past their start
-- deadline (start_within) expired.

-- name: resume_due --
-- The deadline service: waits whose deadline passed on the database clock,
-- through the deadline index, oldest first, resumed: queued again with
-- ctx.timed_out true and no input (a timer's deadline is what it waited
-- for, so not timed out). A row a signal, a child or an input delivery is
-- writing right now is stepped over (SKIP LOCKED) and looked at again next
-- time, when its wait may be over. Events and NOTIFYs in the statement.
WITH due AS (
    SELECT id, wait_reason, wait_name, wait_until
      FROM runqueue_run
     WHERE status IN ('waiting', 'waiting_for_user') AND wait_until IS NOT NULL
       AND wait_until <= now()
     ORDER BY wait_until
     LIMIT %(limit)s
       FOR NO KEY UPDATE SKIP LOCKED
), resumed AS (
    UPDATE runqueue_run r
       SET input = NULL,
           timed_out = d.wait_reason <> 'timer',
           -- include: resume --
      FROM due d
     WHERE r.id = d.id AND r.status IN ('waiting', 'waiting_for_user')
       AND r.wait_until <= now()
    RETURNING r.id, r.lease_epoch, d.wait_reason, d.wait_name, r.timed_out, d.wait_until
), logged AS (
    -- late_ms: how long after its deadline the wait ended (tools/bench/waits.py).
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT s.id, 'run.resumed', s.lease_epoch,
           jsonb_build_object('reason', s.wait_reason, 'name', s.wait_name,
                              'timed_out', s.timed_out,
                              'late_ms', round(extract(epoch FROM clock_timestamp()
                                                               - s.wait_until) * 1000)),
           now()
      FROM resumed s
)
SELECT s.id, s.wait_reason
  FROM resumed s
 WHERE (SELECT count(pg_notify(%(channel)s, '')) FROM (SELECT 1 FROM resumed LIMIT 1) AS n) >= 0;

-- name: next_deadline --
-- Seconds until the earliest deadline (negative: one is due), or NULL: how
-- long the deadline service may sleep. The earliest wait deadline and the
-- earliest start deadline (start_within), one probe of each partial index.
SELECT extract(epoch FROM least(
           (SELECT min(wait_until) FROM runqueue_run
             WHERE status IN ('waiting', 'waiting_for_user') AND wait_until IS NOT NULL),
           (SELECT min(start_by) FROM runqueue_run
             WHERE status IN ('queued', 'pending') AND start_by IS NOT NULL
               AND paused_at IS NULL)) - now());

-- name: expire_unstarted --
-- The deadline service: queued runs whose start deadline (start_within)
-- passed on the database clock, through the start deadline index, oldest
-- first, cancelled with reason expired (docs/decisions.md, "Run
-- deadlines"), and pending turns past theirs too (a turn's deadline counts
-- from its submit: "Busy sessions: on_busy"): a new epoch, %(failure)s as
-- the record, run.cancelled. A row a claim (or a promotion) holds right
-- now is stepped over (SKIP LOCKED); the UPDATE re-checks status and
-- deadline on the row's latest version, so a run is claimed or expired,
-- never both (a claim clears start_by and takes only runs before it, the
-- fragment claimable). An expired child counts in its parent
-- (runqueue_join), and an expired run in a session queues its session's
-- next pending turn if the session has no active run left
-- (runqueue_promote), as any cancel. The expired runs' ids returned.
WITH due AS (
    SELECT id
      FROM runqueue_run
     WHERE status IN ('queued', 'pending') AND start_by IS NOT NULL AND start_by <= now()
       AND paused_at IS NULL
     ORDER BY start_by
     LIMIT %(limit)s
       FOR NO KEY UPDATE SKIP LOCKED
),
-- include: expire_due --

-- name: expire_active_turn --
-- A submit to a session whose active run is queued and past its start
-- deadline (no worker took it in time): that run expired in the submit's
-- transaction (under the row lock its routing holds), as the deadline
-- service would, so the session is not busy with a run that can never
-- start, and its line moves (runqueue_promote). Its id, or no row.
WITH due AS (
    SELECT id
      FROM runqueue_run
     WHERE id = %(run_id)s AND status IN ('queued', 'pending')
       AND start_by IS NOT NULL AND start_by <= now() AND paused_at IS NULL
),
-- include: expire_due --

-- fragment: expire_due --
-- The expiry of the runs in ``due`` (a CTE the statement opens with):
-- cancelled with reason expired, %(failure)s their record, a new epoch,
-- run.cancelled; a child counts in its parent (runqueue_join) and a
-- session's next pending turn is queued if it has no active run left
-- (runqueue_promote), as any cancel. The expired runs' ids.
expired AS (
    UPDATE runqueue_run r
       SET status = 'cancelled',
           lease_epoch = r.lease_epoch + 1,
           finished_at = now(),
           failure = %(failure)s::jsonb,
           lease_owner = '',
           lease_token = NULL,
           lease_expires_at = NULL
      FROM due d
     WHERE r.id = d.id AND r.status IN ('queued', 'pending') AND r.start_by <= now()
       AND r.paused_at IS NULL
    RETURNING r.id, r.lease_epoch, r.parent_id, r.start_by, r.tenant, r.session_id
), joined AS (
    SELECT runqueue_join(array_agg(e.parent_id), %(channel)s) AS resumed
      FROM expired e
     WHERE e.parent_id IS NOT NULL
    HAVING count(*) > 0
), promoted AS (
    SELECT runqueue_promote(array_agg(e.tenant), array_agg(e.session_id), %(channel)s) AS n
      FROM expired e
     WHERE e.session_id IS NOT NULL
    HAVING count(*) > 0
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT e.id, 'run.cancelled', e.lease_epoch,
           jsonb_build_object('reason', 'expired', 'actor', 'runqueue',
                              'start_by', e.start_by,
                              'late_ms', round(extract(epoch FROM clock_timestamp()
                                                               - e.start_by) * 1000)),
           now()
      FROM expired e
)
SELECT e.id FROM expired e
 WHERE (SELECT count(*) FROM joined) >= 0 AND (SELECT count(*) FROM promoted) >= 0;
