-- The finish: a worker's finishes, alone or with its next claim.

-- fragment: finish --
-- The finishes of finish_and_claim(_capped), each under its own fence (id, epoch, token); a
-- lease missing from finished_ids was fenced. Why: docs/decisions/queue.md, "Performance".
input AS (
    SELECT (e->>0)::uuid AS id, (e->>1)::bigint AS epoch, (e->>2)::uuid AS token,
           -- result, failure: [value] or [], so a handler's null stays JSON null, none SQL NULL.
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
           -- The row keeps its claim (its owner and token too): claim_held.
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
-- The end of finish_and_claim(_capped): the failed finishes' events, the watched runs' NOTIFYs,
-- then a row per claimed run (one of NULLs if none) with finished_ids, joined and promoted.
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
-- The worker's one statement per round: finish the runs its slots ended and claim up to
-- %(limit)s, every event included, in one commit (docs/decisions/queue.md, "Performance").
-- Either part may be empty (no finishes: claim is cheaper; limit 0: a plain finish).
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
-- Finish a run the worker still owns, its event in the same statement: one round trip, one
-- commit. Zero rows: fenced. Its parent counts it and its session moves on; a success writes
-- no event row, so a watched run's NOTIFY is sent here (the finish fragment).
WITH finished AS (
    UPDATE runqueue_run
       SET status = %(status)s::text,
           result = %(result)s::jsonb,
           failure = %(failure)s::jsonb,
           finished_at = now(),
           success_event_id = CASE WHEN %(status)s::text = 'succeeded'
                                   THEN nextval('runqueue_run_event_id_seq') END,
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
