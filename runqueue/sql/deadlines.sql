-- The deadline service: waits whose deadline passed, and runs past their start
-- deadline (start_within) expired.

-- name: resume_due --
-- The deadline service: waits past their deadline on the database clock, oldest first, queued
-- again with ctx.timed_out (a timer is not timed out). A row being written now is stepped over
-- (SKIP LOCKED) and looked at again next time, when its wait may be over.
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
-- The deadline service: queued runs and pending turns past their start deadline, cancelled as
-- expired. SKIP LOCKED and the UPDATE's re-check on the row's latest version: a run is claimed
-- or expired, never both (docs/decisions/sessions.md, "Run deadlines").
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
-- A submit to a session whose active run is queued past its start deadline: that run expired
-- in the submit's transaction, as the deadline service would, so the session is not busy with
-- a run that can never start, and its line moves. Its id, or no row.
WITH due AS (
    SELECT id
      FROM runqueue_run
     WHERE id = %(run_id)s AND status IN ('queued', 'pending')
       AND start_by IS NOT NULL AND start_by <= now() AND paused_at IS NULL
),
-- include: expire_due --

-- fragment: expire_due --
-- The expiry of the runs in the CTE due: cancelled as expired, %(failure)s their record, a new
-- epoch, run.cancelled; parents and sessions move on as after any cancel. Their ids.
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
