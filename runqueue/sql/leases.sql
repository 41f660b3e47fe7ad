-- A lease's fenced writes (renew, give up, give back, spawn) and the sweep of
-- expired leases.

-- fragment: idle_limit --
-- The last condition of a fence: in a worker transaction the server ends it if the worker sits
-- idle longer, set for the transaction only (docs/decisions/sessions.md, "Worker and runtime").
AND (%(idle_timeout)s::text IS NULL
     OR (SELECT set_config('idle_in_transaction_session_timeout',
                           %(idle_timeout)s::text, true)) IS NOT NULL)

-- fragment: expire_set --
-- The expiry path of a lease given up or expired: requeued after c.delay seconds, or
-- dead-lettered with c.failure once no attempt is left; a new epoch, no token.
SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'failed' ELSE 'queued' END,
    lease_epoch = r.lease_epoch + 1,
    scheduled_for = CASE WHEN r.attempts >= r.max_attempts THEN r.scheduled_for
                         ELSE now() + make_interval(secs => c.delay) END,
    failure = CASE WHEN r.attempts >= r.max_attempts THEN c.failure::jsonb
                   ELSE r.failure END,
    finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
    lease_owner = '',
    lease_token = NULL,
    lease_expires_at = NULL,
    -- include: claim_cleared --

-- fragment: give_back --
-- The end of a SET (alias r) that gives a lease back unspent (a shutdown, a budget wait):
-- queued and due now, the attempt handed back, a new epoch that fences the handler, no lease.
status = 'queued',
lease_epoch = r.lease_epoch + 1,
attempts = greatest(r.attempts - 1, 0),
scheduled_for = now(),
lease_owner = '',
lease_token = NULL,
lease_expires_at = NULL,
-- include: claim_cleared --

-- fragment: claim_cleared --
-- The end of a SET that takes a running run's claim off its row: the statement writes it out as
-- an event row (claims_ended), so the next claim finds the columns free and the log shows it once.
claim_event_id = NULL,
claimed_at = NULL,
claim_wait_ms = NULL

-- fragment: claims_ended --
-- Two CTEs after a CTE moved (the ids a statement took out of running): each moved run's claim,
-- as its row held it before the move (the statement's snapshot; a fenced move changes only the
-- lease it read, whose claim nothing else writes), inserted as an event row under its id and
-- time. Why: docs/decisions/queue.md, "Claim and success on the run's row".
ended AS (
    SELECT o.*
      FROM runqueue_run o
     WHERE o.id = ANY(ARRAY(SELECT m.id FROM moved m)) AND o.status = 'running'
),
-- include: claim_logged --

-- fragment: claim_logged --
-- A CTE: the claims of the runs in CTE ended (columns as runqueue_run's) as event rows.
claim_logged AS (
    INSERT INTO runqueue_run_event (id, run_id, type, lease_epoch, data, created_at)
    SELECT e.claim_event_id, e.id, 'run.claimed', e.lease_epoch,
           runqueue_claimed_data(e.lease_owner::text, e.lease_token, e.attempts,
                                 e.priority::integer, e.claim_wait_ms),
           e.claimed_at
      FROM ended e
     WHERE e.claim_event_id IS NOT NULL
)

-- name: fence_renew --
-- The heartbeat, and the first statement of each worker transaction that keeps the run running:
-- asserts the lease and renews it; zero rows: fenced. HOT when its page has room (migration 0026);
-- no row lock of its own to log (no BEFORE UPDATE trigger on the runs: migration 0037).
UPDATE runqueue_run
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now()
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
   AND status = 'running'
   -- include: idle_limit --
RETURNING id;

-- name: fence_renew_many --
-- The heartbeat of every lease a worker holds in one statement, each row fenced (an id missing
-- from the result was fenced), with whether its run was paused: the handler is given back at
-- its next step should the pause's NOTIFY be missed.
UPDATE runqueue_run r
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now()
  FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(tokens)s::uuid[])
       AS i(id, epoch, token)
 WHERE r.id = i.id AND r.lease_epoch = i.epoch AND r.lease_token = i.token
   AND r.status = 'running'
   AND r.id = ANY(%(ids)s::uuid[])
RETURNING r.id, r.paused_at IS NOT NULL;

-- name: fence_give_up --
-- A transient failure gives the lease up and takes the expiry path at once: requeued with
-- backoff, or dead-lettered at max_attempts, a new epoch either way. %(failure)s: a
-- runqueue.leases.failures.Failure.
WITH moved AS (
    UPDATE runqueue_run r
       -- include: expire_set --
      FROM (SELECT %(backoff_seconds)s::float8 AS delay, %(failure)s::jsonb AS failure) AS c
     WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
       AND r.status = 'running'
       -- include: idle_limit --
    RETURNING r.id, r.status, r.lease_epoch, r.attempts, r.scheduled_for,
              -- Dead-lettered: a terminal transition, counted in the parent,
              -- and the session's next pending turn queued.
              CASE WHEN r.status = 'failed' AND r.parent_id IS NOT NULL
                   THEN runqueue_join(ARRAY[r.parent_id], %(channel)s) END AS joined,
              CASE WHEN r.status = 'failed' AND r.session_id IS NOT NULL
                   THEN runqueue_promote(ARRAY[r.tenant], ARRAY[r.session_id], %(channel)s)
              END AS promoted
),
-- include: claims_ended --
SELECT * FROM moved;

-- name: fence_release --
-- Give a run back unfinished on worker shutdown (the give-back).
WITH moved AS (
    UPDATE runqueue_run r
       SET
           -- include: give_back --
     WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
       AND r.status = 'running'
       -- include: idle_limit --
    RETURNING r.id, r.lease_epoch
),
-- include: claims_ended --
SELECT * FROM moved;

-- name: fence_spawn --
-- ctx.spawn's fence: the lease renewed and the child counted open under the parent's row lock;
-- the child and its tool record follow in this transaction, so a fenced or cancelled parent
-- creates none. Zero rows: fenced.
UPDATE runqueue_run
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now(),
       children_open = children_open + 1
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
   AND status = 'running'
   -- include: idle_limit --
RETURNING id;

-- name: expired_leases --
-- The sweeper's read: running runs whose lease expired on the database clock.
SELECT id, lease_epoch, attempts, max_attempts
  FROM runqueue_run
 WHERE status = 'running' AND lease_expires_at <= now()
   -- Always true: the leased index's range (its guard, runqueue/models/runs.py).
   AND lease_owner >= ''
 ORDER BY lease_expires_at
 LIMIT %(limit)s;

-- name: sweep_expired --
-- Requeue or dead-letter the runs the sweeper read, re-checking epoch, status and expiry; a row
-- being written is stepped over (SKIP LOCKED), so a frozen worker never blocks the sweep. Each
-- failure is built in Python: the epoch re-check keeps its attempts the row's.
WITH candidates AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(delays)s::float8[],
                         %(failures)s::text[])
        AS c(id, epoch, delay, failure)
), locked AS (
    SELECT r.id
      FROM runqueue_run r
      JOIN candidates c ON c.id = r.id
     WHERE r.lease_epoch = c.epoch AND r.status = 'running' AND r.lease_expires_at <= now()
       FOR NO KEY UPDATE OF r SKIP LOCKED
), swept AS (
    UPDATE runqueue_run r
       -- include: expire_set --
      FROM candidates c
     WHERE r.id = c.id AND r.id IN (SELECT id FROM locked) AND r.lease_epoch = c.epoch
       AND r.status = 'running' AND r.lease_expires_at <= now()
    RETURNING r.id, r.status, r.lease_epoch, r.attempts, r.max_attempts, r.scheduled_for,
              c.epoch AS expired_epoch, r.parent_id, r.tenant, r.session_id
), moved AS (
    SELECT s.id FROM swept s
),
-- include: claims_ended --
, joined AS (
    -- The dead letters with a parent count in it (runqueue_join).
    SELECT runqueue_join(array_agg(s.parent_id), %(channel)s) AS resumed
      FROM swept s
     WHERE s.status = 'failed' AND s.parent_id IS NOT NULL
    HAVING count(*) > 0
), promoted AS (
    -- The dead letters in a session queue its next pending turn.
    SELECT runqueue_promote(array_agg(s.tenant), array_agg(s.session_id), %(channel)s) AS n
      FROM swept s
     WHERE s.status = 'failed' AND s.session_id IS NOT NULL
    HAVING count(*) > 0
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT s.id,
           CASE WHEN s.status = 'failed' THEN 'run.failed' ELSE 'run.requeued' END,
           s.lease_epoch,
           jsonb_build_object('reason', 'lease_expired', 'attempt', s.attempts,
                              'expired_epoch', s.expired_epoch,
                              'scheduled_for', s.scheduled_for),
           now()
      FROM swept s
)
SELECT id, status, lease_epoch, attempts FROM swept
 WHERE (SELECT count(*) FROM joined) >= 0 AND (SELECT count(*) FROM promoted) >= 0;
