-- The raw statements of runqueue: the claim, the fences and the sweep.
-- Each block starts with "-- name: NAME --" and a line saying why it is raw.
-- Every lease and schedule comparison uses the database clock, now().

-- name: claim --
-- Claim up to %(limit)s due runs in the slot's classes, oldest first within
-- priority, and log run.claimed in the same statement. ARRAY(...) runs the
-- subquery once (IN (SELECT ... LIMIT k) may re-run it and claim more than k).
WITH claimed AS (
    UPDATE runqueue_run r
       SET status = 'running',
           lease_epoch = r.lease_epoch + 1,
           attempts = r.attempts + 1,
           lease_owner = %(owner)s,
           lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
           heartbeat_at = now(),
           started_at = coalesce(r.started_at, now())
     WHERE r.id = ANY(ARRAY(
            SELECT q.id
              FROM runqueue_run q
             WHERE q.status = 'queued'
               AND q.priority BETWEEN %(min_priority)s AND %(max_priority)s
               AND least(q.priority / 10, 2) = ANY(%(class_indexes)s::int[])
               AND (q.scheduled_for IS NULL OR q.scheduled_for <= now())
               AND q.attempts < q.max_attempts
             ORDER BY q.priority, q.created_at
             LIMIT %(limit)s
               FOR NO KEY UPDATE SKIP LOCKED))
    RETURNING r.*
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT c.id, 'run.claimed', c.lease_epoch,
           jsonb_build_object(
               'owner', c.lease_owner,
               'attempt', c.attempts,
               'priority', c.priority,
               'wait_ms', greatest(0, round(extract(epoch FROM statement_timestamp() - greatest(
                   c.created_at, coalesce(c.scheduled_for, c.created_at))) * 1000))),
           now()
      FROM claimed c
)
SELECT * FROM claimed ORDER BY priority, created_at;

-- name: fence_renew --
-- The heartbeat, and the first statement of every worker transaction that
-- keeps the run running: asserts the lease and renews it. Zero rows: fenced.
-- Touches only unindexed columns, so it stays a HOT update.
UPDATE runqueue_run
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now()
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND status = 'running'
RETURNING id;

-- name: fence_finish --
-- Finish a run the worker still owns: succeeded or failed, and log the
-- event in the same statement (written only if the fence matched). One
-- statement, so in autocommit it is a transaction of its own with the fence
-- first: one round trip per finish. Zero rows: fenced, nothing written.
WITH finished AS (
    UPDATE runqueue_run
       SET status = %(status)s,
           result = %(result)s,
           failure = %(failure)s,
           finished_at = now(),
           lease_owner = '',
           lease_expires_at = NULL
     WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND status = 'running'
    RETURNING id, lease_epoch
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT f.id, %(event_type)s, f.lease_epoch, %(event_data)s, now()
      FROM finished f
)
SELECT id FROM finished;

-- name: fence_finish_batch --
-- The finishes of several runs in one statement (the worker's group commit):
-- each row keeps its own fence (id, epoch, status = 'running'), and only the
-- rows whose fence matched get their event. The ids returned committed; a
-- lease whose id is missing was fenced and wrote nothing. JSON travels as
-- text (NULL stays SQL NULL), cast per row.
WITH input AS (
    SELECT *
      FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(statuses)s::text[],
                  %(results)s::text[], %(failures)s::text[], %(event_types)s::text[],
                  %(event_data)s::text[])
           AS i(id, epoch, status, result, failure, event_type, event_data)
), finished AS (
    UPDATE runqueue_run r
       SET status = i.status,
           result = i.result::jsonb,
           failure = i.failure::jsonb,
           finished_at = now(),
           lease_owner = '',
           lease_expires_at = NULL
      FROM input i
     WHERE r.id = i.id AND r.lease_epoch = i.epoch AND r.status = 'running'
       -- By id, whatever the statistics say: without this the planner may
       -- hash-join the input against every running run.
       AND r.id = ANY(%(ids)s::uuid[])
    RETURNING r.id, r.lease_epoch, i.event_type, i.event_data
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT f.id, f.event_type, f.lease_epoch, f.event_data::jsonb, now()
      FROM finished f
)
SELECT id FROM finished;

-- name: fence_wait --
-- End the turn waiting for the user: the run keeps its session slot but
-- holds no lease. Zero rows: fenced.
UPDATE runqueue_run
   SET status = 'waiting_for_user',
       lease_owner = '',
       lease_expires_at = NULL
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND status = 'running'
RETURNING id;

-- name: fence_give_up --
-- A transient failure gives the lease up and takes the expiry path at once:
-- requeued with backoff, or dead-lettered at max_attempts. The epoch goes
-- up, as on every transition the next owner must not confuse with this one.
UPDATE runqueue_run
   SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
       lease_epoch = lease_epoch + 1,
       scheduled_for = CASE WHEN attempts >= max_attempts THEN scheduled_for
                            ELSE now() + make_interval(secs => %(backoff_seconds)s) END,
       failure = CASE WHEN attempts >= max_attempts THEN %(failure)s::jsonb ELSE failure END,
       finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
       lease_owner = '',
       lease_expires_at = NULL
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND status = 'running'
RETURNING id, status, lease_epoch, attempts, scheduled_for;

-- name: fence_release --
-- Give a run back unfinished on worker shutdown: due at once, the attempt
-- handed back, the epoch bumped so the handler still running is fenced.
-- scheduled_for = now(): the claim's wait counts from when it became due.
UPDATE runqueue_run
   SET status = 'queued',
       lease_epoch = lease_epoch + 1,
       attempts = greatest(attempts - 1, 0),
       scheduled_for = now(),
       lease_owner = '',
       lease_expires_at = NULL
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND status = 'running'
RETURNING id, lease_epoch;

-- name: expired_leases --
-- The sweeper's read: running runs whose lease expired on the database clock.
SELECT id, lease_epoch, attempts, max_attempts
  FROM runqueue_run
 WHERE status = 'running' AND lease_expires_at <= now()
 ORDER BY lease_expires_at
 LIMIT %(limit)s;

-- name: sweep_expired --
-- Requeue with backoff, or dead-letter at max_attempts, the runs the sweeper
-- read, re-checking what it read (epoch, status, expiry): a run finished or
-- renewed in between is left alone. A row its owner is writing right now is
-- stepped over (SKIP LOCKED), so a frozen worker never blocks the sweeper;
-- the next sweep re-reads it. Events in the same statement.
WITH candidates AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(delays)s::float8[])
        AS c(id, epoch, delay)
), locked AS (
    SELECT r.id
      FROM runqueue_run r
      JOIN candidates c ON c.id = r.id
     WHERE r.lease_epoch = c.epoch AND r.status = 'running' AND r.lease_expires_at <= now()
       FOR NO KEY UPDATE OF r SKIP LOCKED
), swept AS (
    UPDATE runqueue_run r
       SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'failed' ELSE 'queued' END,
           lease_epoch = r.lease_epoch + 1,
           scheduled_for = CASE WHEN r.attempts >= r.max_attempts THEN r.scheduled_for
                                ELSE now() + make_interval(secs => c.delay) END,
           failure = CASE WHEN r.attempts >= r.max_attempts THEN jsonb_build_object(
                         'classification', 'lease_expired',
                         'error_type', 'LeaseExpired',
                         'message', format('lease expired on attempt %%s of %%s', r.attempts, r.max_attempts),
                         'traceback', NULL,
                         'attempt', r.attempts)
                     ELSE r.failure END,
           finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
           lease_owner = '',
           lease_expires_at = NULL
      FROM candidates c
     WHERE r.id = c.id AND r.id IN (SELECT id FROM locked) AND r.lease_epoch = c.epoch
       AND r.status = 'running' AND r.lease_expires_at <= now()
    RETURNING r.id, r.status, r.lease_epoch, r.attempts, r.max_attempts, r.scheduled_for,
              c.epoch AS expired_epoch
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
SELECT id, status, lease_epoch, attempts FROM swept;

-- name: cancel --
-- Cancel a non-terminal run; the epoch bump fences a worker still running it.
UPDATE runqueue_run
   SET status = 'cancelled',
       lease_epoch = lease_epoch + 1,
       finished_at = now(),
       lease_owner = '',
       lease_expires_at = NULL
 WHERE id = %(run_id)s AND status IN ('queued', 'running', 'waiting_for_user')
RETURNING id, lease_epoch;

-- name: operator_requeue --
-- An operator sends a dead-lettered run back to the queue: a fresh attempt
-- budget, due at once (scheduled_for = now(): the claim's wait counts from
-- here, not from creation), a new epoch. The failure moves to the event.
UPDATE runqueue_run
   SET status = 'queued',
       lease_epoch = lease_epoch + 1,
       attempts = 0,
       scheduled_for = now(),
       finished_at = NULL,
       failure = NULL
 WHERE id = %(run_id)s AND status = 'failed'
RETURNING id, lease_epoch, priority;

-- name: deliver_input --
-- Resume a run waiting for the user, in place: queued again with the input
-- attached, a fresh attempt budget for the new turn, and a new epoch; due
-- now (scheduled_for = now(): the claim's wait counts from the delivery).
UPDATE runqueue_run
   SET status = 'queued',
       input = %(input)s,
       lease_epoch = lease_epoch + 1,
       attempts = 0,
       scheduled_for = now()
 WHERE id = %(run_id)s AND status = 'waiting_for_user'
RETURNING id, lease_epoch;

-- name: set_config --
-- A session (or, with is_local, transaction) setting such as lock_timeout:
-- set_config takes the value as a parameter, which SET cannot.
SELECT set_config(%(name)s, %(value)s, %(is_local)s);

-- name: notify --
-- Wake idle workers; sent inside the transaction, delivered on commit.
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: admin_tenants --
-- The admin's tenant filter: distinct tenants by a skip scan of the
-- (tenant, session_id) index, one index probe per tenant instead of a
-- DISTINCT over every run. The ORM cannot write a recursive CTE.
WITH RECURSIVE tenants(tenant) AS (
    (SELECT tenant FROM runqueue_run ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT r.tenant FROM runqueue_run r
             WHERE r.tenant > t.tenant ORDER BY r.tenant LIMIT 1)
      FROM tenants t
     WHERE t.tenant IS NOT NULL
)
SELECT tenant FROM tenants WHERE tenant IS NOT NULL LIMIT %(limit)s;
