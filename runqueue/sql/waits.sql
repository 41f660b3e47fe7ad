-- Durable waits: a turn ending in a wait, and a signal or the user's input
-- ending one.

-- name: fence_wait --
-- End the turn waiting for the user: the run keeps its session slot but
-- holds no lease. Zero rows: fenced. With a timeout the wait has a deadline
-- on the database clock (the worker's deadline service, resume_due).
WITH moved AS (
    UPDATE runqueue_run
       SET status = 'waiting_for_user',
           lease_owner = '',
           lease_token = NULL,
           lease_expires_at = NULL,
           input = NULL,
           timed_out = false,
           wait_reason = 'user',
           wait_name = '',
           waiting_since = now(),
           wait_until = now() + make_interval(secs => %(timeout)s::float8),
           -- include: claim_cleared --
     WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
       AND status = 'running'
       -- include: idle_limit --
    RETURNING id
),
-- include: claims_ended --
SELECT id FROM moved;

-- name: suspend --
-- The turn ends waiting for children, a signal, an event or a time, after the fence and under
-- its row lock: queued at once if that is there already, else waiting (children counted from
-- their statuses). Why: docs/decisions/run-trees.md, "Sub-agents and durable waits".
WITH mail AS (
    DELETE FROM runqueue_signal
     WHERE id = (SELECT s.id FROM runqueue_signal s
                  WHERE %(reason)s = 'signal' AND s.run_id = %(run_id)s AND s.name = %(name)s
                  ORDER BY s.id LIMIT 1)
    RETURNING data
), event AS (
    SELECT e.id,
           -- include: event_input --
           AS data
      FROM runqueue_inbound_event e
     WHERE %(reason)s = 'event' AND e.tenant = %(tenant)s AND e.name = %(name)s
       AND e.received_at >= now() - make_interval(secs => %(window)s::float8)
       AND e.data @> %(match)s::jsonb
       AND NOT EXISTS (SELECT 1 FROM runqueue_event_delivery d
                        WHERE d.run_id = %(run_id)s AND d.event_id = e.id)
     ORDER BY e.id
     LIMIT 1
), took AS (
    INSERT INTO runqueue_event_delivery (run_id, event_id, delivered_at)
    SELECT %(run_id)s, v.id, now() FROM event v
), decided AS (
    SELECT r.id,
           CASE %(reason)s
               WHEN 'children' THEN o.n_open = 0
               WHEN 'signal' THEN EXISTS (SELECT 1 FROM mail)
               WHEN 'event' THEN EXISTS (SELECT 1 FROM event)
               ELSE coalesce(%(until)s::timestamptz <= now(), false)
           END AS ready,
           o.n_open
      FROM runqueue_run r
     CROSS JOIN LATERAL (
         SELECT CASE WHEN %(reason)s = 'children' THEN
                -- include: open_children --
                END AS n_open) AS o
     WHERE r.id = %(run_id)s AND r.status = 'running'
), resumed AS (
    UPDATE runqueue_run r
       SET children_open = coalesce(d.n_open, r.children_open),
           input = CASE WHEN %(reason)s = 'event' THEN (SELECT v.data FROM event v)
                        ELSE (SELECT m.data FROM mail m) END,
           timed_out = false,
           -- include: resume --
           , -- and its claim written out (claims_ended):
           -- include: claim_cleared --
      FROM decided d
     WHERE r.id = d.id AND r.status = 'running' AND d.ready
    RETURNING r.id, r.status, r.lease_epoch, r.wait_until, r.priority
), waited AS (
    UPDATE runqueue_run r
       SET status = 'waiting',
           children_open = coalesce(d.n_open, r.children_open),
           input = NULL,
           timed_out = false,
           wait_reason = %(reason)s,
           wait_name = %(name)s,
           wait_match = %(match)s::jsonb,
           waiting_since = now(),
           wait_until = coalesce(%(until)s::timestamptz,
                                 now() + make_interval(secs => %(timeout)s::float8)),
           lease_owner = '',
           lease_token = NULL,
           lease_expires_at = NULL,
           -- include: claim_cleared --
      FROM decided d
     WHERE r.id = d.id AND r.status = 'running' AND NOT d.ready
    RETURNING r.id, r.status, r.lease_epoch, r.wait_until, r.priority
), moved AS (
    SELECT id FROM resumed UNION ALL SELECT id FROM waited
),
-- include: claims_ended --
SELECT status, lease_epoch, wait_until, priority FROM resumed
UNION ALL
SELECT status, lease_epoch, wait_until, priority FROM waited;

-- name: lock_run --
-- A signal's first statement: the run's row lock, which a wait's transition
-- holds too, so the two never interleave: the signal either finds the run
-- waiting for it or leaves it in the mailbox before the wait looks there.
SELECT status, wait_reason, wait_name, priority
  FROM runqueue_run
 WHERE id = %(run_id)s
   FOR NO KEY UPDATE;

-- name: resume_signal --
-- A signal reaches the run waiting for it (under the row lock lock_run
-- took): queued again with the signal's data as its input, a new epoch.
UPDATE runqueue_run r
   SET input = %(data)s::jsonb,
       timed_out = false,
       -- include: resume --
 WHERE r.id = %(run_id)s AND r.status = 'waiting' AND r.wait_reason = 'signal'
   AND r.wait_name = %(name)s
RETURNING r.id, r.lease_epoch;

-- name: deliver_input --
-- Resume a run waiting for the user, in place (the resume): queued again
-- with the input attached, a fresh attempt budget for the new turn, and a
-- new epoch; due now (the claim's wait counts from the delivery).
UPDATE runqueue_run r
   SET input = %(input)s,
       timed_out = false,
       -- include: resume --
 WHERE r.id = %(run_id)s AND r.status = 'waiting_for_user'
RETURNING r.id, r.lease_epoch;
