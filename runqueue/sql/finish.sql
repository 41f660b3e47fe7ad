-- The finish: a worker's finishes, alone or with its next claim.

-- fragment: finish --
-- The finishes of finish_and_claim and finish_and_claim_capped (their first
-- CTEs): the runs a worker's slots ended (succeeded or failed). Each finish
-- keeps its own fence (id, epoch, token, status = 'running'): only the rows whose
-- fence matched are finished (and logged by the logged fragment); a lease
-- whose id is missing from finished_ids was fenced and wrote nothing. The
-- token (lease_token) is the claim's: an epoch alone can be issued twice
-- when a failover loses the claim's WAL, a random token cannot. The
-- finishes travel as one JSON document (psycopg dumps one text, not eight
-- arrays of it), an array per finish: id, epoch, token, status, event
-- type, then the result and the failure each as [value] or [] (so a
-- handler's null result stays a JSON null, and no result is SQL NULL:
-- a JSON null's ->0 is itself, an empty array's is SQL NULL),
-- then the event's data. The ids come again as %(ids)s, an array the
-- UPDATE's index condition reads. A finished run with a parent counts in
-- its parent (joined: runqueue_join, fn_tree.sql); for runs without one
-- joined has no row and calls nothing. A finished run in a session queues
-- its session's next pending turn (promoted: runqueue_promote); for runs
-- without a session promoted has no row and calls nothing.
-- A success writes no event row: the run's row keeps the lease's owner and
-- token and takes its run.succeeded event's id (the events' sequence), and
-- the log (runqueue_event_log) reads both events from it (migration 0024;
-- docs/decisions.md, "Claim and success on the run's row"); a failure's
-- claim is written as an event row by the trigger that lets it go
-- (runqueue_run_log_kept, fn_log.sql).
input AS (
    SELECT (e->>0)::uuid AS id, (e->>1)::bigint AS epoch, (e->>2)::uuid AS token,
           e->>3 AS status, e->>4 AS event_type, e->5->0 AS result, e->6->0 AS failure,
           e->7 AS event_data
      FROM jsonb_array_elements(%(finishes)s::jsonb) AS e
), finished AS (
    UPDATE runqueue_run r
       SET status = i.status,
           result = i.result,
           failure = i.failure,
           finished_at = now(),
           success_event_id = CASE WHEN i.status = 'succeeded'
                                   THEN nextval('runqueue_run_event_id_seq') END,
           lease_owner = CASE WHEN i.status = 'succeeded' THEN r.lease_owner ELSE '' END,
           lease_token = CASE WHEN i.status = 'succeeded' THEN r.lease_token END,
           lease_expires_at = NULL
      FROM input i
     WHERE r.id = i.id AND r.lease_epoch = i.epoch AND r.lease_token = i.token
       AND r.status = 'running'
       -- By id, whatever the statistics say: without this the planner may
       -- hash-join the input against every running run.
       AND r.id = ANY(%(ids)s::uuid[])
    RETURNING r.id, r.lease_epoch, i.event_type, i.event_data, r.parent_id, r.tenant,
              r.session_id, r.success_event_id,
              -- A failure's event id, taken here with a success's: every
              -- finish's event sorts before the claims of the same statement
              -- (the logged fragment).
              CASE WHEN i.status <> 'succeeded'
                   THEN nextval('runqueue_run_event_id_seq') END AS event_id
), joined AS (
    SELECT runqueue_join(array_agg(f.parent_id), %(channel)s) AS resumed
      FROM finished f
     WHERE f.parent_id IS NOT NULL
    HAVING count(*) > 0
), promoted AS (
    SELECT runqueue_promote(array_agg(f.tenant), array_agg(f.session_id), %(channel)s) AS n
      FROM finished f
     WHERE f.session_id IS NOT NULL
    HAVING count(*) > 0
)

-- fragment: logged --
-- The end of finish_and_claim and finish_and_claim_capped: the events of the
-- failed finishes (a claim's and a success's are the row's: the finish
-- fragment), the NOTIFYs of the watched runs, then the result. It has at
-- least one row:
-- finished_ids, then the claimed run's columns (all NULL when nothing was
-- claimed), then how many parents the finishes resumed (joined, evaluated
-- once: the result always has a row) and how many pending turns they
-- queued (promoted).
logged AS (
    INSERT INTO runqueue_run_event (id, run_id, type, lease_epoch, data, created_at)
    SELECT f.event_id, f.id, f.event_type, f.lease_epoch, f.event_data, now()
      FROM finished f
     WHERE f.event_id IS NOT NULL
), grown AS (
    SELECT f.id FROM finished f WHERE f.success_event_id IS NOT NULL
    UNION ALL
    SELECT c.id FROM claimed c
),
-- include: watched --
SELECT (SELECT coalesce(array_agg(f.id), '{}') FROM finished f) AS finished_ids, c.*,
       (SELECT j.resumed FROM joined j) AS joined_resumed,
       (SELECT p.n FROM promoted p) AS promoted_turns
  FROM (SELECT 1) AS one
  LEFT JOIN claimed c ON true
 WHERE (SELECT count(*) FROM watched) >= 0
 ORDER BY c.priority, c.created_at

-- name: finish_and_claim --
-- The worker's one statement per round trip: finish the runs its slots ended
-- (the finish fragment) and claim up to %(limit)s runs (the plain claim),
-- with every event, in one transaction (autocommit: one commit). Either
-- part may be empty: no finishes is a plain claim (though claim is cheaper
-- for that), limit 0 a plain finish.
WITH
-- include: finish --
,
-- include: plain_claimed --
,
-- include: logged --
;

-- name: finish_and_claim_capped --
-- finish_and_claim with the capped claim.
WITH
-- include: finish --
,
-- include: capped_claimed --
,
-- include: logged --
;

-- name: fence_finish --
-- Finish a run the worker still owns: succeeded or failed, and log the
-- event in the same statement (written only if the fence matched). One
-- statement, so in autocommit it is a transaction of its own with the fence
-- first: one round trip per finish. Zero rows: fenced, nothing written.
-- JSON travels as text, as in finish_and_claim; a failure is a
-- runqueue.leases.failures.Failure built in Python. A run with a parent counts in
-- it (runqueue_join), and a run in a session queues its session's next
-- pending turn (runqueue_promote), in this statement. A success writes no
-- event row, as in finish_and_claim (its finish fragment says why); the
-- NOTIFY of a watched run is sent here instead.
WITH finished AS (
    UPDATE runqueue_run
       SET status = %(status)s::text,
           result = %(result)s::jsonb,
           failure = %(failure)s::jsonb,
           finished_at = now(),
           success_event_id = CASE WHEN %(status)s::text = 'succeeded'
                                   THEN nextval('runqueue_run_event_id_seq') END,
           lease_owner = CASE WHEN %(status)s::text = 'succeeded' THEN lease_owner ELSE '' END,
           lease_token = CASE WHEN %(status)s::text = 'succeeded' THEN lease_token END,
           lease_expires_at = NULL
     WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
       AND status = 'running'
       -- include: idle_limit --
    RETURNING id, lease_epoch, parent_id, tenant, session_id
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT f.id, %(event_type)s, f.lease_epoch, %(event_data)s::jsonb, now()
      FROM finished f
     WHERE %(status)s::text <> 'succeeded'
), grown AS (
    SELECT f.id FROM finished f WHERE %(status)s::text = 'succeeded'
),
-- include: watched --
SELECT f.id, CASE WHEN f.parent_id IS NOT NULL
                  THEN runqueue_join(ARRAY[f.parent_id], %(channel)s) END,
       CASE WHEN f.session_id IS NOT NULL
            THEN runqueue_promote(ARRAY[f.tenant], ARRAY[f.session_id], %(channel)s) END
  FROM finished f
 WHERE (SELECT count(*) FROM watched) >= 0;
