-- The raw statements of runqueue: the claim, the fences and the sweep.
-- Each block starts with "-- name: NAME --" and a line saying why it is raw.
-- A "-- fragment: NAME --" block is SQL that statements share: a line
-- "-- include: NAME --" stands for it (put in when the file is loaded, so a
-- statement is still one text; runqueue/sql/__init__.py).
-- Every lease and schedule comparison uses the database clock, now().
-- The class of a priority is runqueue_priority_class and its siblings
-- (functions.sql), never arithmetic here. What a run must be to be claimed
-- is the fragment claimable, in functions.sql.

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
-- its parent (joined: runqueue_join, functions.sql); for runs without one
-- joined has no row and calls nothing. A finished run in a session queues
-- its session's next pending turn (promoted: runqueue_promote); for runs
-- without a session promoted has no row and calls nothing.
-- A success writes no event row: the run's row keeps the lease's owner and
-- token and takes its run.succeeded event's id (the events' sequence), and
-- the log (runqueue_event_log) reads both events from it (migration 0024;
-- docs/decisions.md, "Claim and success on the run's row"); a failure's
-- claim is written as an event row by the trigger that lets it go
-- (runqueue_run_log_kept, functions.sql).
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

-- fragment: claim_set --
-- What a claim writes to each run it takes: running, the next epoch and
-- attempt, the lease, and a fresh random token that every fenced write of
-- this lease must match (docs/decisions.md, "A fencing token lost WAL
-- cannot recreate"). A run with a budget adds the call its claim reserved
-- (runqueue_budget_take) to what it reserved so far. The claim's
-- run.claimed event is the row's: its id from the events' sequence and its
-- time (the log reads it from the row; migration 0024).
       SET status = 'running',
           lease_epoch = r.lease_epoch + 1,
           lease_token = gen_random_uuid(),
           claim_event_id = nextval('runqueue_run_event_id_seq'),
           claimed_at = now(),
           claim_wait_ms = greatest(0, round(extract(epoch FROM statement_timestamp() - greatest(
               r.created_at, coalesce(r.scheduled_for, r.created_at))) * 1000)),
           attempts = r.attempts + 1,
           lease_owner = %(owner)s,
           lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
           heartbeat_at = now(),
           started_at = coalesce(r.started_at, now()),
           -- start_within is for the first start: a run claimed once is
           -- never expired (docs/decisions.md, "Run deadlines").
           start_by = NULL,
           budget_reserved = r.budget_reserved + coalesce(r.budget_tokens, 0),
           -- Pinned by its first claim, moved only between turns
           -- (runqueue_claim_version, functions.sql).
           handler_version = coalesce(runqueue_claim_version(
               r.id, r.kind, r.handler_version, %(kinds)s::text[], %(kind_newest)s::int[],
               %(kind_versions)s::text[], %(kind_moves)s::text[], %(kind_move_to)s::int[]),
               r.handler_version)

-- fragment: claim_after_finishes --
-- A claim's UPDATE takes its runs once the statement's finishes are done
-- (the CTE finished; an empty one in claim and claim_capped): a gating
-- InitPlan, run before the first run is claimed. So the finishes' event ids
-- (taken in finished) are below the claims' (taken per claimed row), as a
-- replay of the log in id order needs: a claim a finish made room for comes
-- after it (tools/chaos/verify.py, cap_violations). Without it the executor
-- may run claimed first.
AND (SELECT count(*) FROM finished) >= 0

-- fragment: claim_pruned --
-- A claim's UPDATE (plain or capped) reads the live partition alone, never
-- a day of finished runs: partition pruning, not a status test (the ids
-- chose queued runs). Statuses of the live partition as migration 0009 made
-- it, not live_statuses: this list implies no partial index's predicate, so
-- the ids stay the index condition.
AND r.status IN ('queued', 'running', 'waiting_for_user')

-- fragment: claim_commit --
-- The last condition of a claim's UPDATE: a statement that only claims
-- (%(claim_commit)s 'off': no finishes in it, and DURABLE_CLAIMS left
-- False) commits without waiting for its WAL to reach the disk or a
-- synchronous standby. The lease token makes that safe: a claim lost in a
-- crash or a failover leaves the run queued without the token, so every
-- fenced write of the lost lease writes nothing, and the owner's first
-- durable write (a tool record, a checkpoint, its finish) flushes the
-- claim with it (docs/decisions.md, "A claim's commit does not wait for
-- the disk"). set_config(..., true): this transaction only. An InitPlan,
-- run once (a claim that finds nothing writes nothing, so its commit has
-- nothing to wait for either way).
AND (%(claim_commit)s::text IS NULL
     OR (SELECT set_config('synchronous_commit', %(claim_commit)s::text, true)) IS NOT NULL)

-- fragment: expire_set --
-- The expiry path, for a lease given up (fence_give_up) or expired
-- (sweep_expired): requeued after c.delay seconds, or dead-lettered with
-- c.failure once the run has no attempt left; a new epoch either way, and
-- no token.
SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'failed' ELSE 'queued' END,
    lease_epoch = r.lease_epoch + 1,
    scheduled_for = CASE WHEN r.attempts >= r.max_attempts THEN r.scheduled_for
                         ELSE now() + make_interval(secs => c.delay) END,
    failure = CASE WHEN r.attempts >= r.max_attempts THEN c.failure::jsonb
                   ELSE r.failure END,
    finished_at = CASE WHEN r.attempts >= r.max_attempts THEN now() END,
    lease_owner = '',
    lease_token = NULL,
    lease_expires_at = NULL

-- fragment: give_back --
-- The give-back: a lease returned without its attempt spent (a worker's
-- shutdown, fence_release; a wait for a budget, fence_budget_wait), the
-- end of its UPDATE's SET list (alias r). Queued and due at once (the
-- claim's wait counts from when it became due again), the attempt handed
-- back, a new epoch so the handler still running is fenced, no lease.
status = 'queued',
lease_epoch = r.lease_epoch + 1,
attempts = greatest(r.attempts - 1, 0),
scheduled_for = now(),
lease_owner = '',
lease_token = NULL,
lease_expires_at = NULL

-- fragment: watched --
-- The NOTIFY of each watched run (runqueue_stream_watch) whose log the
-- statement grew without an event row (the ids of its CTE grown: claims,
-- successes), as the trigger on runqueue_run_event sends one for each row
-- (functions.sql, runqueue_event_notify): the stream reads the claim and the
-- success from the run's row. A CTE the statement's last SELECT counts, once
-- (an InitPlan); a NOTIFY repeated in one transaction is sent once.
watched AS (
    SELECT pg_notify('runqueue_events', x.id::text)
      FROM grown x
     WHERE EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = x.id)
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

-- fragment: claimed_only --
-- The end of claim and claim_capped: one row per claimed run (none when
-- nothing was claimed), the NOTIFYs of the watched ones sent first.
grown AS (SELECT c.id FROM claimed c),
-- include: watched --
SELECT c.*
  FROM claimed c
 WHERE (SELECT count(*) FROM watched) >= 0
 ORDER BY c.priority, c.created_at

-- fragment: idle_limit --
-- The last condition of a fence statement: inside a worker transaction
-- (%(idle_timeout)s not NULL), the server ends the transaction if the
-- worker sits idle in it longer (a frozen worker must not hold the run's row
-- lock for ever). set_config(..., true): local to this transaction, so
-- nothing of runqueue's outlives it on a server connection a transaction
-- pooler hands to other clients next. An InitPlan, run once.
AND (%(idle_timeout)s::text IS NULL
     OR (SELECT set_config('idle_in_transaction_session_timeout',
                           %(idle_timeout)s::text, true)) IS NOT NULL)

-- fragment: plain_claimed --
-- The plain claim (finish_and_claim, claim): up to %(limit)s due runs in
-- the slot group's classes, oldest first within priority. The claim only
-- takes queued rows, so it never touches a row being finished.
-- ARRAY(...) runs the claim's subquery once (IN (SELECT ... LIMIT k) may
-- re-run it and claim more than k). runqueue_priority_class
-- (functions.sql) is the class of a priority, inlined by the planner.
claimed AS (
    UPDATE runqueue_run r
    -- include: claim_set --
     WHERE r.id = ANY(ARRAY(
            SELECT q.id
              FROM runqueue_run q
             WHERE q.priority BETWEEN %(min_priority)s AND %(max_priority)s
               AND runqueue_priority_class(q.priority) = ANY(%(class_indexes)s::int[])
               -- What may be claimed: functions.sql, as runqueue_claim_capped.
               -- include: claimable --
               -- A kind and version this worker has (functions.sql): a
               -- filter, the claim index stays the scan.
               AND runqueue_claim_version(
                       q.id, q.kind, q.handler_version, %(kinds)s::text[],
                       %(kind_newest)s::int[], %(kind_versions)s::text[],
                       %(kind_moves)s::text[], %(kind_move_to)s::int[]) IS NOT NULL
               -- A run with a budget waits for the walk, which reserves its
               -- call (finish_and_claim_capped; docs/decisions.md, "Budgets").
               AND q.budget_key IS NULL
             ORDER BY q.priority, q.created_at
             LIMIT %(limit)s
               FOR NO KEY UPDATE SKIP LOCKED))
       -- include: claim_after_finishes --
       -- include: claim_pruned --
       -- include: claim_commit --
    RETURNING r.*
)

-- fragment: capped_claimed --
-- The capped claim (finish_and_claim_capped, claim_capped), when
-- concurrency caps or budgets may apply (a RUNQUEUE["CONCURRENCY"] default,
-- a ConcurrencyLimit row, a budget): the plain claim but its WHERE
-- (tests/database/test_concurrency.py checks that), whose ids come from
-- runqueue_claim_capped (functions.sql): a walk in the same claim order
-- that steps over runs whose (key, class) is at its cap or being claimed by
-- another worker, holding a transaction-scoped advisory lock per (key,
-- class) it claims in until this statement commits. The scalar subquery
-- runs the function once (an InitPlan; the cast makes ANY take its array,
-- not a subquery's rows). The function locked each id after checking, on
-- its latest version, that the run is queued and due, and the lock holds
-- until this statement commits; so the UPDATE needs no status test, and
-- must not have one: "status = 'queued'" lets the planner walk the whole
-- claim index with the ids as a filter instead of the key. (It has the live
-- partition's statuses, which only prune the finished days away.) The runs
-- the statement finishes (%(ids)s, epochs, tokens; empty in claim_capped)
-- free their places for its own claim.
claimed AS (
    UPDATE runqueue_run r
    -- include: claim_set --
     WHERE r.id = ANY((SELECT runqueue_claim_capped(
               %(limit)s, %(min_priority)s, %(max_priority)s, %(class_indexes)s::int[],
               %(default_caps)s::int[], %(ids)s::uuid[], %(epochs)s::bigint[],
               %(tokens)s::uuid[], %(kinds)s::text[], %(kind_newest)s::int[],
               %(kind_versions)s::text[], %(kind_moves)s::text[],
               %(kind_move_to)s::int[]))::uuid[])
       -- include: claim_after_finishes --
       -- include: claim_pruned --
       -- include: claim_commit --
    RETURNING r.*
)

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

-- name: claim --
-- A claim with nothing to finish (a wake-up's, leases.claim's): no finish
-- CTEs, whose UPDATE of the runs table costs its executor start-up even
-- when it finishes nothing (about a tenth of a millisecond of an idle
-- pickup). One row per claimed run. It finishes nothing: finished is empty
-- (the claim's claim_after_finishes reads it).
WITH finished AS (SELECT NULL::uuid AS id WHERE false),
-- include: plain_claimed --
,
-- include: claimed_only --
;

-- name: claim_capped --
-- claim with the capped claim (no finishing runs: %(ids)s is empty).
WITH finished AS (SELECT NULL::uuid AS id WHERE false),
-- include: capped_claimed --
,
-- include: claimed_only --
;

-- name: fence_renew --
-- The heartbeat, and the first statement of every worker transaction that
-- keeps the run running: asserts the lease and renews it. Zero rows: fenced.
-- Touches only unindexed columns, so it is a HOT update when the row's page
-- has room for the new version: the live partition's fillfactor leaves it
-- (migration 0026). It still writes a lock record before the update: the
-- BEFORE UPDATE trigger runqueue_run_log_kept (functions.sql) makes
-- PostgreSQL lock the old row first, whatever the trigger's WHEN says.
UPDATE runqueue_run
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now()
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
   AND status = 'running'
   -- include: idle_limit --
RETURNING id;

-- name: stream_text --
-- ctx.stream's live text: one NOTIFY on runqueue_text per piece, only while
-- the lease holds, and only if a web process watches the run. Raw: a NOTIFY
-- and a row lock in one statement. The run row is locked FOR SHARE, so a
-- fence committing meanwhile (cancel, requeue, another claim: each an
-- UPDATE of the row) either waits for this statement's commit, the deltas
-- then delivered before its own NOTIFYs, or makes it match nothing: a fenced
-- worker's text reaches no one. Zero rows: fenced. No row is written (the
-- lock sets the row's xmax; docs/decisions.md, "Token streaming").
WITH owned AS (
    SELECT r.id
      FROM runqueue_run r
     WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
       AND r.status = 'running'
       FOR SHARE
), sent AS (
    SELECT pg_notify('runqueue_text', u.piece)
      FROM owned o, unnest(%(pieces)s::text[]) AS u(piece)
     WHERE EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = o.id)
)
SELECT o.id, (SELECT count(*) FROM sent) AS sent FROM owned o;

-- name: fence_renew_many --
-- The heartbeat of every lease a worker holds, in one statement: each row
-- keeps its own fence, and an id missing from the result was fenced. Each
-- row says whether its run was paused (runqueue.pausing.pause_run): the
-- handler is given back at its next step, should the NOTIFY be missed.
UPDATE runqueue_run r
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now()
  FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[], %(tokens)s::uuid[])
       AS i(id, epoch, token)
 WHERE r.id = i.id AND r.lease_epoch = i.epoch AND r.lease_token = i.token
   AND r.status = 'running'
   AND r.id = ANY(%(ids)s::uuid[])
RETURNING r.id, r.paused_at IS NOT NULL;

-- name: fence_finish --
-- Finish a run the worker still owns: succeeded or failed, and log the
-- event in the same statement (written only if the fence matched). One
-- statement, so in autocommit it is a transaction of its own with the fence
-- first: one round trip per finish. Zero rows: fenced, nothing written.
-- JSON travels as text, as in finish_and_claim; a failure is a
-- runqueue.failures.Failure built in Python. A run with a parent counts in
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

-- name: fence_wait --
-- End the turn waiting for the user: the run keeps its session slot but
-- holds no lease. Zero rows: fenced. With a timeout the wait has a deadline
-- on the database clock (the worker's deadline service, resume_due).
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
       wait_until = now() + make_interval(secs => %(timeout)s::float8)
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
   AND status = 'running'
   -- include: idle_limit --
RETURNING id;

-- name: fence_give_up --
-- A transient failure gives the lease up and takes the expiry path at once:
-- requeued with backoff, or dead-lettered at max_attempts. The epoch goes
-- up, as on every transition the next owner must not confuse with this one.
-- %(failure)s is a runqueue.failures.Failure built in Python.
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
               THEN runqueue_join(ARRAY[r.parent_id], %(channel)s) END,
          CASE WHEN r.status = 'failed' AND r.session_id IS NOT NULL
               THEN runqueue_promote(ARRAY[r.tenant], ARRAY[r.session_id], %(channel)s) END;

-- name: fence_release --
-- Give a run back unfinished on worker shutdown (the give-back).
UPDATE runqueue_run r
   SET
       -- include: give_back --
 WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
   AND r.status = 'running'
   -- include: idle_limit --
RETURNING r.id, r.lease_epoch;

-- name: fence_spawn --
-- A parent creates a child (ctx.spawn): the fence, renewing the lease, and
-- the child counted open, under the parent's row lock. The child's insert
-- and its tool record follow in the same transaction, so a fenced parent
-- (or one a cancel committed against) creates none. Zero rows: fenced.
UPDATE runqueue_run
   SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
       heartbeat_at = now(),
       children_open = children_open + 1
 WHERE id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_token = %(token)s
   AND status = 'running'
   -- include: idle_limit --
RETURNING id;

-- name: suspend --
-- The turn ends waiting for its children, a signal, an inbound event or a
-- time (ctx.wait_for_children, wait_for_signal, wait_for_event, sleep_until).
-- Run after the
-- fence, in its transaction: under the run's row lock, which every child's
-- join and every signal takes too, and in a statement of its own, so it
-- sees each count and signal committed before the lock was held. No lease
-- is kept. What it waits for may be there already: no child open, a signal
-- of that name in the mailbox (taken from it: deleted, its data the input),
-- a time already past. Then the run is queued again at once (the resume,
-- resumed), else it waits (status waiting): two UPDATEs of the one row,
-- whose conditions exclude each other, so exactly one writes it. A wait
-- for children counts them from their statuses (children_open set to it),
-- not from the counter alone: whatever happened to the counter before
-- (a dead letter requeued, a count from an older version), the wait starts
-- from the truth, and every child's transition after it counts in it under
-- this row lock. A wait for an event takes the oldest event of its tenant
-- and name received within the retention window (%(window)s seconds) whose
-- data contains the match and which this run has not taken yet (recorded
-- in runqueue_event_delivery, so it is never taken twice); the caller holds
-- the (tenant, name) lock exclusively (event_name_exclusive), which every
-- event's insert holds shared: an event committed before is seen here, one
-- inserted after finds the run waiting (deliver_event).
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
      FROM decided d
     WHERE r.id = d.id AND r.status = 'running' AND d.ready
    RETURNING r.status, r.lease_epoch, r.wait_until, r.priority
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
           lease_expires_at = NULL
      FROM decided d
     WHERE r.id = d.id AND r.status = 'running' AND NOT d.ready
    RETURNING r.status, r.lease_epoch, r.wait_until, r.priority
)
SELECT * FROM resumed
UNION ALL
SELECT * FROM waited;

-- fragment: event_input --
-- What a run woken by an inbound event gets as its input (ctx.input), from
-- the event's row (alias e): one shape for a wait that finds the event and
-- an event that finds the wait.
jsonb_build_object('name', e.name, 'key', e.key, 'data', e.data,
                   'received_at', e.received_at)

-- name: event_name_shared --
-- An inbound event's first statement: the (tenant, name) lock, shared, so
-- events of one name are recorded side by side, but never while a wait for
-- that name is being written (event_name_exclusive): the wait either sees
-- this event committed or is committed before deliver_event looks for it.
-- Transaction-scoped; the key is hashed as the concurrency caps' are.
SELECT pg_advisory_xact_lock_shared(
           hashtextextended('runqueue.event:' || %(tenant)s || ':' || %(name)s, 0));

-- name: event_name_exclusive --
-- A wait for an inbound event takes its (tenant, name) lock exclusively,
-- after its fence (the run's row lock) and before suspend: events of that
-- name in flight commit first and suspend sees them; later ones wait for
-- the wait to commit, then find the run waiting.
SELECT pg_advisory_xact_lock(
           hashtextextended('runqueue.event:' || %(tenant)s || ':' || %(name)s, 0));

-- name: record_event --
-- An inbound event's row, once per (tenant, name, key): no row when the key
-- is known already (a repeated delivery; the caller reads the first).
INSERT INTO runqueue_inbound_event (tenant, name, key, data, principal, started, received_at)
VALUES (%(tenant)s, %(name)s, %(key)s, %(data)s::jsonb, %(principal)s, '[]'::jsonb,
        statement_timestamp())
ON CONFLICT (tenant, name, key) DO NOTHING
RETURNING id, received_at;

-- name: event_triggers --
-- The admin's triggers an event fires: its name, enabled, for its tenant or
-- every tenant, whose match its data contains (jsonb @>).
SELECT t.id, t.kind, t.priority
  FROM runqueue_event_trigger t
 WHERE t.name = %(name)s AND t.enabled AND t.tenant IN ('', %(tenant)s)
   AND %(data)s::jsonb @> t.match
 ORDER BY t.id;

-- name: matching --
-- Which of a list of matches (a JSON array) an event's data contains, by
-- position from 0: code triggers are matched by PostgreSQL's @> too, so a
-- match means the same in code, in the admin and in a wait.
SELECT (m.i - 1)::integer
  FROM jsonb_array_elements(%(matches)s::jsonb) WITH ORDINALITY AS m(match, i)
 WHERE %(data)s::jsonb @> m.match
 ORDER BY m.i;

-- name: deliver_event --
-- An inbound event ends the waits it matches (its tenant, its name, its
-- data containing the wait's match), under each run's row lock, taken in
-- id order (two events of a name never deadlock); the caller holds the
-- (tenant, name) lock shared, and the event's row is inserted in this
-- transaction. Each run woken is queued again with the event as its input
-- and the event recorded as taken by it. A run whose wait another
-- transaction ended while this one waited for its lock is re-checked on
-- its latest version and left alone. The woken runs' ids, epochs and
-- priorities returned.
WITH waiting AS (
    SELECT r.id
      FROM runqueue_run r
     WHERE r.tenant = %(tenant)s AND r.status = 'waiting' AND r.wait_reason = 'event'
       AND r.wait_name = %(name)s AND %(data)s::jsonb @> r.wait_match
     ORDER BY r.id
       FOR NO KEY UPDATE
), woken AS (
    UPDATE runqueue_run r
       SET input = (SELECT
                        -- include: event_input --
                      FROM runqueue_inbound_event e WHERE e.id = %(event_id)s),
           timed_out = false,
           -- include: resume --
      FROM waiting w
     WHERE r.id = w.id AND r.status = 'waiting' AND r.wait_reason = 'event'
       AND r.wait_name = %(name)s
    RETURNING r.id, r.lease_epoch, r.priority
), taken AS (
    INSERT INTO runqueue_event_delivery (run_id, event_id, delivered_at)
    SELECT w.id, %(event_id)s, now() FROM woken w
)
SELECT w.id, w.lease_epoch, w.priority FROM woken w ORDER BY w.id;

-- name: set_event_started --
-- The runs an event's triggers started, on its row (same transaction).
UPDATE runqueue_inbound_event SET started = %(started)s::jsonb WHERE id = %(event_id)s;

-- name: prune_events --
-- Retention: up to %(limit)s inbound events received more than
-- %(retention)s seconds ago, oldest first, with the record of which runs
-- took them. An event being written now is stepped over.
WITH old AS (
    SELECT id
      FROM runqueue_inbound_event
     WHERE received_at < now() - make_interval(secs => %(retention)s::float8)
     ORDER BY received_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), taken AS (
    DELETE FROM runqueue_event_delivery d USING old o WHERE d.event_id = o.id
)
DELETE FROM runqueue_inbound_event e USING old o WHERE e.id = o.id
RETURNING e.id;

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
-- the next sweep re-reads it. Events in the same statement. Each run's
-- dead letter is a runqueue.failures.Failure built in Python from the
-- attempts and max_attempts read (lease_expired_failure), as JSON text: the
-- epoch re-check guarantees they are still the row's, since every change of
-- attempts bumps the epoch.
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
), joined AS (
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

-- name: set_config --
-- A setting such as lock_timeout for the current transaction only (in
-- autocommit: nothing): set_config takes the value as a parameter, which SET
-- LOCAL cannot. Never a session's setting: behind a transaction pooler the
-- server connection serves other clients next.
SELECT set_config(%(name)s, %(value)s, true);

-- name: notify --
-- Wake idle workers; sent inside the transaction, delivered on commit.
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: claim_latency --
-- The dashboard's claims of the last %(window_seconds)s seconds, by class:
-- how many, and the median and 99th percentile of how long each run waited
-- since it became due (wait_ms, as the claim measured it). Raw: a claim is
-- an event row (its attempt ended otherwise: the events' created_at BRIN)
-- or held by its run's row (migration 0024): a running run (the live
-- partition) or a succeeded one, which finished after its claim, so the
-- window's bound on finished_at keeps the finished days to the window's.
WITH claims AS (
    SELECT (e.data->>'priority')::int AS priority, (e.data->>'wait_ms')::float8 AS wait_ms
      FROM runqueue_run_event e
     WHERE e.type = 'run.claimed'
       AND e.created_at >= now() - make_interval(secs => %(window_seconds)s)
    UNION ALL
    SELECT r.priority, r.claim_wait_ms::float8
      FROM runqueue_run r
     WHERE r.status = 'running' AND r.claim_event_id IS NOT NULL
       AND r.claimed_at >= now() - make_interval(secs => %(window_seconds)s)
    UNION ALL
    SELECT r.priority, r.claim_wait_ms::float8
      FROM runqueue_run r
     WHERE r.status = 'succeeded' AND r.claim_event_id IS NOT NULL
       AND r.finished_at >= now() - make_interval(secs => %(window_seconds)s)
       AND r.claimed_at >= now() - make_interval(secs => %(window_seconds)s)
)
SELECT runqueue_priority_class(c.priority) AS ci, count(*) AS n,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY c.wait_ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY c.wait_ms) AS p99
  FROM claims c
 GROUP BY 1;

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

-- name: create_runs --
-- Submit without a waiting run to deliver to: the new runs, their
-- run.created events (most on their rows: created), their idempotency keys
-- (if any) and the NOTIFYs that wake idle workers (one per class with a due
-- run, sent on commit), in one statement: in autocommit, one round trip and
-- one commit. A key or a
-- session already taken makes the whole statement fail with its unique
-- violation, writing nothing; submit then takes the routing path.
-- The runs travel as one JSON document, an array per run (the columns in
-- the order below; the payload last, as its own text), parsed once:
-- psycopg dumps one text where twenty arrays cost it a Python call per
-- element. What every run of a call shares (traceparent, parent, place,
-- the interrupted run) is a parameter of its own. ids are made by the
-- caller, so it knows each row; the caller builds the Run from what it
-- sent and the returned created_at, start_by and created_event_id.
-- A run given a place is a pending turn (on_busy: it waits in line behind
-- its session's active run, whose row lock the caller holds; it wakes no
-- worker), its key's outcome %(key_outcome)s.
WITH input AS (
    SELECT (e->>0)::uuid AS id, e->>1 AS tenant, e->>2 AS principal, e->>3 AS session_id,
           e->>4 AS kind, e->15 AS payload, (e->>5)::smallint AS priority,
           (e->>6)::int AS max_attempts, (e->>7)::timestamptz AS scheduled_for,
           e->>8 AS key, e->>9 AS hash, %(traceparent)s::text AS traceparent,
           e->>10 AS concurrency_key, e->>11 AS budget_key, (e->>12)::int AS budget_tokens,
           %(parent_id)s::uuid AS parent_id, (e->>13)::float8 AS start_within,
           (e->>14)::float8 AS max_duration, %(place)s::bigint AS place,
           %(interrupted_id)s::uuid AS interrupted_id
      FROM jsonb_array_elements(%(runs)s::jsonb) AS e
     -- With keys: wait at most %(lock_timeout)s on a concurrent submit's
     -- uncommitted key (set before the first row is inserted; local to the
     -- transaction, so in autocommit to this statement).
     WHERE %(lock_timeout)s::text IS NULL
        OR (SELECT set_config('lock_timeout', %(lock_timeout)s::text, true)) IS NOT NULL
), created AS (
    INSERT INTO runqueue_run (id, tenant, principal, session_id, kind, payload, status,
                              priority, attempts, max_attempts, scheduled_for, lease_epoch,
                              lease_owner, traceparent, concurrency_key, budget_key,
                              budget_tokens, parent_id, start_by, max_duration, place,
                              interrupted_id, created_event_id)
    SELECT i.id, i.tenant, i.principal, i.session_id, i.kind, i.payload,
           CASE WHEN i.place IS NULL THEN 'queued' ELSE 'pending' END,
           i.priority, 0, i.max_attempts, i.scheduled_for, 0, '', i.traceparent,
           i.concurrency_key, i.budget_key, i.budget_tokens, i.parent_id,
           -- start_within counts from when the run is due (docs/decisions.md,
           -- "Run deadlines"), on the database clock.
           greatest(coalesce(i.scheduled_for, now()), now())
               + make_interval(secs => i.start_within),
           i.max_duration, i.place, i.interrupted_id,
           -- A run whose run.created says only its priority (no start
           -- deadline, budget, place in line or interrupted run: most runs)
           -- holds that event on its row, its id taken here; the others
           -- write it as an event row (logged). docs/decisions.md, "Claim
           -- and success on the run's row".
           CASE WHEN i.start_within IS NULL AND i.budget_key IS NULL AND i.place IS NULL
                     AND i.interrupted_id IS NULL
                THEN nextval('runqueue_run_event_id_seq') END
      FROM input i
    RETURNING *
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT c.id, 'run.created', c.lease_epoch,
           jsonb_build_object('priority', c.priority)
           || CASE WHEN c.start_by IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('start_by', c.start_by) END
           -- A declared budget, so the log alone replays what claims reserved.
           || CASE WHEN c.budget_key IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('budget', jsonb_build_object(
                            'key', c.budget_key, 'tokens', c.budget_tokens)) END
           || CASE WHEN c.place IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('pending', true, 'place', c.place) END
           || CASE WHEN c.interrupted_id IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('interrupted', c.interrupted_id) END,
           now()
      FROM created c
     WHERE c.created_event_id IS NULL
), keyed AS (
    INSERT INTO runqueue_idempotency_key (tenant, principal, key, request_hash, run_id,
                                          outcome, expires_at)
    SELECT i.tenant, i.principal, i.key, i.hash, c.id, %(key_outcome)s,
           now() + make_interval(secs => %(key_retention_seconds)s)
      FROM input i
      JOIN created c ON c.id = i.id
     WHERE i.key IS NOT NULL
)
SELECT c.id, c.created_at, c.start_by, c.created_event_id
  FROM created c
 -- The NOTIFYs, once (an InitPlan), before the rows are returned.
 WHERE (SELECT count(pg_notify(%(channel)s, n)) FROM unnest(%(notify)s::text[]) AS n) >= 0;

-- name: clock --
-- The database clock: schedules are evaluated against now(), like leases,
-- never against a worker's clock.
SELECT now();

-- name: stream_watch --
-- A web process starts streaming a run: the trigger on runqueue_run_event
-- NOTIFYs runqueue_events for it from now on. An upsert: several streams of
-- one process share the row.
INSERT INTO runqueue_stream_watch (run_id, watcher, expires_at)
VALUES (%(run_id)s, %(watcher)s, now() + make_interval(secs => %(ttl_seconds)s))
ON CONFLICT (run_id, watcher) DO UPDATE SET expires_at = EXCLUDED.expires_at;

-- name: stream_unwatch --
-- The process's last stream of the run ended.
DELETE FROM runqueue_stream_watch WHERE run_id = %(run_id)s AND watcher = %(watcher)s;

-- name: stream_watch_refresh --
-- A live process keeps its rows; rows of a process that died expire. Run by
-- each process's listener every minute or so.
WITH refreshed AS (
    UPDATE runqueue_stream_watch
       SET expires_at = now() + make_interval(secs => %(ttl_seconds)s)
     WHERE watcher = %(watcher)s
)
DELETE FROM runqueue_stream_watch WHERE expires_at < now() AND watcher <> %(watcher)s;

-- name: metrics_queued --
-- Prometheus, per class: queued runs counted through the claim index and
-- capped at %(cap)s entries, and the longest wait among the first %(head)s
-- due runs in claim order. Bounded reads whatever the backlog; the ORM
-- cannot put a LIMIT inside a correlated aggregate.
SELECT c.idx,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run r
             WHERE r.status = 'queued' AND r.priority BETWEEN c.low AND c.high
             LIMIT %(cap)s) AS q) AS queued,
       (SELECT extract(epoch FROM now() - min(h.due_at)) FROM (
            SELECT coalesce(r.scheduled_for, r.created_at) AS due_at
              FROM runqueue_run r
             WHERE r.status = 'queued' AND r.priority BETWEEN c.low AND c.high
               AND (r.scheduled_for IS NULL OR r.scheduled_for <= now())
             ORDER BY r.priority, r.created_at
             LIMIT %(head)s) AS h) AS oldest_due_seconds
  FROM runqueue_priority_classes() AS c
 ORDER BY c.idx;

-- name: metrics_leased --
-- Prometheus: running and waiting runs by class, through the leased index,
-- at most %(cap)s rows per status (ids are random, so a capped read is a
-- fair sample of the classes). Each status is a literal: the partial index
-- only serves a predicate it can prove. ORDER BY id is the leased index's
-- order: on the live partition, small beside a backlog of queued runs, the
-- planner would otherwise filter a sequential scan, reading the backlog
-- whenever few runs wait.
SELECT 'running' AS status, runqueue_priority_class(q.priority) AS idx, count(*) AS n
  FROM (SELECT priority FROM runqueue_run WHERE status = 'running'
         ORDER BY id LIMIT %(cap)s) AS q
 GROUP BY 2
UNION ALL
SELECT 'waiting_for_user', runqueue_priority_class(q.priority), count(*)
  FROM (SELECT priority FROM runqueue_run WHERE status = 'waiting_for_user'
         ORDER BY id LIMIT %(cap)s) AS q
 GROUP BY 2
UNION ALL
-- Waiting runs (their children, a signal, a time): in the waiting index's
-- order, so it is read through that index whatever the statistics say.
SELECT 'waiting', runqueue_priority_class(q.priority), count(*)
  FROM (SELECT priority FROM runqueue_run WHERE status = 'waiting'
         ORDER BY wait_reason, id LIMIT %(cap)s) AS q
 GROUP BY 2
UNION ALL
-- A session's pending turns (on_busy "enqueue"): in the line index's order
-- (runqueue_run_pending_place), so read through it.
SELECT 'pending', runqueue_priority_class(q.priority), count(*)
  FROM (SELECT priority FROM runqueue_run WHERE status = 'pending'
         ORDER BY tenant, session_id, place LIMIT %(cap)s) AS q
 GROUP BY 2;

-- name: waiting_by_reason --
-- The dashboard and Prometheus: runs waiting (waiting, waiting_for_user) per
-- reason, each counted up to %(cap)s through the waiting index, in one
-- statement; the ORM cannot put a LIMIT inside a per-reason count.
SELECT r.reason,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run w
             WHERE w.status IN ('waiting', 'waiting_for_user') AND w.wait_reason = r.reason
             LIMIT %(cap)s) AS q)
  FROM unnest(%(reasons)s::text[]) WITH ORDINALITY AS r(reason, n)
 ORDER BY r.n;

-- name: metrics_totals --
-- Prometheus: dead letters, unresolved uncertain tool invocations (and their
-- runs), live workers; each through its partial index or a small table, and
-- capped at %(cap)s.
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run WHERE status = 'failed' LIMIT %(cap)s) AS f),
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_tool_invocation
             WHERE status = 'uncertain' AND resolution IS NULL LIMIT %(cap)s) AS u),
       (SELECT count(DISTINCT u.run_id) FROM (
            SELECT run_id FROM runqueue_tool_invocation
             WHERE status = 'uncertain' AND resolution IS NULL LIMIT %(cap)s) AS u),
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_worker
             WHERE stopped_at IS NULL
               AND last_seen_at >= now() - make_interval(secs => %(stale_seconds)s)
             LIMIT %(cap)s) AS w);

-- name: metrics_estimate --
-- The planner's row estimate for runs of a status in a priority range: what
-- Prometheus gets above the cap, without counting the rows.
EXPLAIN (FORMAT JSON)
SELECT 1 FROM runqueue_run
 WHERE status = %(status)s AND priority BETWEEN %(low)s AND %(high)s;

-- name: take_submit_quota --
-- One submit against an API token's quota, in one statement: GCRA, the
-- "theoretical arrival time" of the next submit moves on by window/quota per
-- admitted submit, and a submit is admitted while that stays within one
-- window of now, so at most quota submits land in any window. The row lock
-- of the upsert serialises a token's concurrent submits. A refused submit
-- leaves tat as it was; retry_after says when the next one is admitted.
INSERT INTO runqueue_api_token_quota AS q (token_id, tat, admitted)
VALUES (%(token_id)s, now() + make_interval(secs => %(interval)s), true)
ON CONFLICT (token_id) DO UPDATE
   SET admitted = greatest(q.tat, now()) + make_interval(secs => %(interval)s)
                  <= now() + make_interval(secs => %(window)s),
       tat = CASE WHEN greatest(q.tat, now()) + make_interval(secs => %(interval)s)
                       <= now() + make_interval(secs => %(window)s)
                  THEN greatest(q.tat, now()) + make_interval(secs => %(interval)s)
                  ELSE q.tat END
RETURNING admitted,
          extract(epoch FROM greatest(tat, now()) + make_interval(secs => %(interval)s)
                             - now() - make_interval(secs => %(window)s)) AS retry_after;

-- name: budget_reserve --
-- ctx.reserve, inside the run's fenced transaction: reserve one request and
-- %(tokens)s on the budget (runqueue_budget_take, waiting for the budget's
-- row), and, when taken, count it in the run's budget_reserved. Returns the
-- verdict and the instant it was reserved at (runqueue_budget_take's: when
-- it got the budget's row; settle refunds into its bucket, and the
-- budget.reserved event carries it). A function's verdict: the ORM cannot
-- call it.
WITH took AS (
    SELECT runqueue_budget_take(%(key)s, %(tenant)s, %(tokens)s, true) AS verdict
), counted AS (
    UPDATE runqueue_run r
       SET budget_reserved = r.budget_reserved + %(tokens)s
      FROM took
     WHERE r.id = %(run_id)s AND took.verdict IN ('taken', 'unlimited')
)
-- (No budget row, 'unlimited': nothing counted, so now() will do.)
SELECT verdict,
       CASE WHEN verdict = 'unlimited' THEN now()
            ELSE current_setting('runqueue.budget_at')::timestamptz END
  FROM took;

-- name: budget_settle --
-- ctx.settle, inside the run's fenced transaction: correct a reservation to
-- what the call used (runqueue_budget_settle) and add it to the run's
-- budget_used. Returns the correction.
WITH settled AS (
    SELECT runqueue_budget_settle(%(key)s, %(tenant)s, %(at)s, %(reserved)s, %(used)s) AS delta
), counted AS (
    UPDATE runqueue_run r
       SET budget_used = r.budget_used + %(used)s
     WHERE r.id = %(run_id)s
)
SELECT delta FROM settled;

-- name: budget_refund --
-- A run given back before its handler started, inside the release's fenced
-- transaction: the call its claim reserved was never made, so its request
-- and tokens go back into the bucket they were reserved in
-- (runqueue_budget_refund) and come off the run's budget_reserved.
-- Returns whether the budget's ring still held that bucket.
WITH refunded AS (
    SELECT runqueue_budget_refund(%(key)s, %(tenant)s, %(at)s, %(tokens)s) AS held
), counted AS (
    UPDATE runqueue_run r
       SET budget_reserved = greatest(r.budget_reserved - %(tokens)s, 0)
     WHERE r.id = %(run_id)s
)
SELECT held FROM refunded;

-- name: fence_budget_wait --
-- The handler waits for a budget (ctx.wait_for_budget): the run goes back
-- to queued with its next call's budget declared, so the claim reserves it
-- before the handler resumes (the give-back). Zero rows: fenced.
UPDATE runqueue_run r
   SET budget_key = %(budget_key)s,
       budget_tokens = %(budget_tokens)s,
       -- include: give_back --
 WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
   AND r.status = 'running'
   -- include: idle_limit --
RETURNING r.id, r.lease_epoch;

-- name: budget_pause --
-- Stop every claim and reservation on a budget until %(until)s (a
-- provider's 429 with Retry-After); a pause already longer stays. Returns
-- the pause in force, no row without such a budget.
UPDATE runqueue_budget
   SET paused_until = greatest(coalesce(paused_until, %(until)s), %(until)s)
 WHERE key = %(key)s
RETURNING paused_until;

-- name: budget_windows --
-- The dashboard and the metrics: each budget's use in its window now, its
-- pause, and its queued runs (through runqueue_run_budget_idx): those whose
-- call cannot be reserved now (paused, or not fitting the window) wait on
-- the budget. The window is a function of the ring: the ORM cannot read it.
SELECT b.key, b.requests, b.tokens, b.per_seconds,
       CASE WHEN b.paused_until > now() THEN b.paused_until END AS paused_until,
       w.tokens AS used_tokens, w.requests AS used_requests,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run q
             WHERE q.budget_key = b.key AND q.status = 'queued' AND q.budget_key IS NOT NULL
             LIMIT %(cap)s) AS c) AS queued,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run q
             WHERE q.budget_key = b.key AND q.status = 'queued' AND q.budget_key IS NOT NULL
               AND (b.paused_until > now()
                    OR (b.requests IS NOT NULL AND w.requests + 1 > b.requests)
                    OR (b.tokens IS NOT NULL AND w.tokens + q.budget_tokens > b.tokens
                        AND w.tokens > 0))
             LIMIT %(cap)s) AS c) AS waiting
  FROM runqueue_budget b
 CROSS JOIN LATERAL runqueue_budget_window(b, now()) AS w
 ORDER BY b.key
 LIMIT %(limit)s;

-- name: budget_held --
-- Why due runs wait, budgets (runqueue.waiting): per budget (the first
-- %(most)s by key) and class, the due queued runs whose call cannot be
-- reserved now: the key paused, no request left in its window, or their
-- tokens do not fit (as runqueue_budget_take decides, but a tenant's turn).
-- Each budget reads at most its first %(cap)s due runs, through
-- runqueue_run_budget_idx in its order (the key is fixed: a walk that
-- stops at the LIMIT), and none while its window has room for any call
-- (the one-time filter before the scan); they are split by class after
-- (sampled: how many it read, above %(cap)s - 1 a class's count is a floor).
-- The window is a function of the ring: the ORM cannot read it.
SELECT b.key, h.idx, h.n, h.sampled,
       CASE WHEN b.paused_until > now() THEN b.paused_until END AS paused_until,
       b.requests, w.requests AS used_requests, b.tokens, w.tokens AS used_tokens,
       b.per_seconds
  FROM runqueue_budget b
 CROSS JOIN LATERAL runqueue_budget_window(b, now()) AS w
 CROSS JOIN LATERAL (
     SELECT runqueue_priority_class(q.priority) AS idx, count(*) FILTER (WHERE q.held) AS n,
            sum(count(*)) OVER () AS sampled
       FROM (
         SELECT r.priority,
                (b.paused_until > now()
                 OR (b.requests IS NOT NULL AND w.requests + 1 > b.requests)
                 OR (b.tokens IS NOT NULL AND w.tokens > 0
                     AND w.tokens + r.budget_tokens > b.tokens)) AS held
           FROM runqueue_run r
          WHERE r.budget_key = b.key AND r.status = 'queued' AND r.budget_key IS NOT NULL
            AND (r.scheduled_for IS NULL OR r.scheduled_for <= now())
            AND (b.paused_until > now()
                 OR (b.requests IS NOT NULL AND w.requests + 1 > b.requests)
                 OR (b.tokens IS NOT NULL AND w.tokens > 0))
          ORDER BY r.tenant
          LIMIT %(cap)s) AS q
      GROUP BY 1) AS h
 WHERE b.key IN (SELECT key FROM runqueue_budget ORDER BY key LIMIT %(most)s)
   AND h.n > 0
 ORDER BY h.idx, b.key;

-- name: budget_window --
-- One budget's pause and use in its window now: the run page says why a
-- run waits on it. The window is a function of the ring.
SELECT CASE WHEN b.paused_until > now() THEN b.paused_until END AS paused_until,
       b.requests, w.requests AS used_requests, b.tokens, w.tokens AS used_tokens,
       b.per_seconds
  FROM runqueue_budget b
 CROSS JOIN LATERAL runqueue_budget_window(b, now()) AS w
 WHERE b.key = %(key)s;

-- name: fork_run --
-- runqueue.fork (docs/decisions.md, "Forking a run"): a new queued run from
-- a finished one, in the transaction that holds the original's row lock
-- (lock_run) and checked its steps: the same kind, tenant, principal,
-- priority, concurrency key, max_attempts and max_duration; no session, no
-- parent, no budget; %(payload)s, or NULL for the original's; its lineage
-- in forked_from. The original's first %(from_step)s tool records (tool
-- outcomes and spawns, numbered from 0) are copied to it under their own
-- numbers, so its handler replays them instead of running them: a copied
-- spawn names the same child. run.created and run.forked on the new run,
-- run.forked on the original (under its lock), and the NOTIFY that wakes
-- idle workers of the run's class (on commit). Raw: one statement, so the
-- run, its records and its events are one round trip.
WITH original AS (
    SELECT o.*
      FROM runqueue_run o
     WHERE o.id = %(run_id)s::uuid AND o.status IN ('succeeded', 'failed', 'cancelled')
), created AS (
    INSERT INTO runqueue_run (id, tenant, principal, session_id, kind, payload, status,
                              priority, attempts, max_attempts, lease_epoch, lease_owner,
                              traceparent, concurrency_key, max_duration, forked_from_id,
                              handler_version)
    SELECT %(fork_id)s::uuid, o.tenant, o.principal, NULL, o.kind,
           coalesce(%(payload)s::jsonb, o.payload), 'queued', o.priority, 0, o.max_attempts,
           0, '', %(traceparent)s::text, o.concurrency_key, o.max_duration, o.id,
           -- Copied steps are replayed by the version that made them.
           CASE WHEN %(from_step)s::integer > 0 THEN o.handler_version END
      FROM original o
    RETURNING id, created_at, priority, lease_epoch
), copied AS (
    INSERT INTO runqueue_tool_invocation (run_id, seq, tool, idempotency, status, arguments,
                                          result, error, lease_epoch, lease_token, resolution,
                                          approval, created_at, finished_at)
    SELECT c.id, t.seq, t.tool, t.idempotency, t.status, t.arguments, t.result, t.error,
           c.lease_epoch, NULL, t.resolution, t.approval, t.created_at, t.finished_at
      FROM created c
      JOIN runqueue_tool_invocation t
        ON t.run_id = %(run_id)s::uuid AND t.seq < %(from_step)s::integer
    RETURNING seq
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT c.id, 'run.created', c.lease_epoch,
           jsonb_build_object('priority', c.priority, 'forked_from', %(run_id)s::text), now()
      FROM created c
    UNION ALL
    SELECT c.id, 'run.forked', c.lease_epoch, %(fork_data)s::jsonb, now()
      FROM created c
    UNION ALL
    SELECT o.id, 'run.forked', o.lease_epoch, %(original_data)s::jsonb, now()
      FROM original o, created c
)
SELECT c.id, c.created_at, (SELECT count(*) FROM copied) AS copied
  FROM created c
 WHERE (SELECT count(pg_notify(%(channel)s::text, %(notify)s::text))) >= 0;

-- name: usage_root --
-- ctx.record_usage's tree: the run's root and the root's session
-- (runqueue_tree_root, functions.sql: a walk up the parents, planned
-- without JIT). No row for a run that does not exist.
SELECT id, session_id FROM runqueue_tree_root(%(run_id)s::uuid);

-- name: record_usage --
-- ctx.record_usage (docs/decisions.md, "Usage and cost"): one model call's
-- tokens and cost, written without the lease's fence (the money was spent,
-- whoever holds the run now), at most once per (run, lease epoch, call):
-- the same call written again counts once. A new record adds to its tree's
-- totals (runqueue_tree_spend, the root's row) in the same statement,
-- under that row's lock, so concurrent calls of one tree add one after the
-- other; the cost reaching the tree's spend cap sets capped_at once. The
-- totals as they are after it (or, for a call counted before, as read).
-- fenced: the recording lease no longer held the run.
WITH recorded AS (
    INSERT INTO runqueue_usage (run_id, root_id, tenant, session_id, kind, lease_epoch, call,
                                attempt, model, input_tokens, output_tokens, cost, fenced,
                                created_at)
    VALUES (%(run_id)s::uuid, %(root_id)s::uuid, %(tenant)s::text, %(session_id)s::text,
            %(kind)s::text, %(epoch)s::bigint, %(call)s::integer, %(attempt)s::integer,
            %(model)s::text, %(input_tokens)s::bigint, %(output_tokens)s::bigint,
            %(cost)s::numeric,
            NOT EXISTS (SELECT 1 FROM runqueue_run r
                         WHERE r.id = %(run_id)s::uuid AND r.lease_epoch = %(epoch)s::bigint
                           AND r.lease_token = %(token)s::uuid AND r.status = 'running'),
            now())
    ON CONFLICT (run_id, lease_epoch, call) DO NOTHING
    RETURNING root_id, input_tokens, output_tokens, cost
), totals AS (
    INSERT INTO runqueue_tree_spend AS t (run_id, cost, input_tokens, output_tokens, calls,
                                          unpriced_calls, updated_at)
    SELECT u.root_id, coalesce(u.cost, 0), u.input_tokens, u.output_tokens, 1,
           (u.cost IS NULL)::integer, now()
      FROM recorded u
    ON CONFLICT (run_id) DO UPDATE
       SET cost = t.cost + EXCLUDED.cost,
           input_tokens = t.input_tokens + EXCLUDED.input_tokens,
           output_tokens = t.output_tokens + EXCLUDED.output_tokens,
           calls = t.calls + 1,
           unpriced_calls = t.unpriced_calls + EXCLUDED.unpriced_calls,
           capped_at = coalesce(t.capped_at,
                                CASE WHEN t.cost + EXCLUDED.cost >= t.spend_cap THEN now() END),
           updated_at = now()
    RETURNING t.cost, t.spend_cap
)
SELECT true, t.cost, t.spend_cap FROM totals t
UNION ALL
SELECT false, s.cost, s.spend_cap
  FROM runqueue_tree_spend s
 WHERE s.run_id = %(root_id)s::uuid AND NOT EXISTS (SELECT 1 FROM recorded);

-- name: mark_spend_capped --
-- After a tree's cost reached its spend cap, in the transaction that
-- cancelled its live runs (reason spend_cap): each of those runs keeps a
-- failure record saying why, as an expired run does. Only the runs this
-- transaction cancelled (their new epoch).
UPDATE runqueue_run r
   SET failure = %(failure)s::jsonb
  FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS c(id, epoch)
 WHERE r.id = c.id AND r.lease_epoch = c.epoch AND r.status = 'cancelled'
   AND r.id = ANY(%(ids)s::uuid[]);

-- name: due_by_handler --
-- Why due runs wait (runqueue.versions): the first %(cap)s due runs of each
-- class in claim order (the claim index), by kind and pinned version, with
-- how many of the pinned ones are between turns (runqueue_between_turns,
-- functions.sql) and how many runs of the class were read. Runs no live
-- worker claims stay at the head of their class, so the first runs are
-- where they show; a class read to the cap gives floors. Raw: a LATERAL
-- per class, which the ORM cannot write.
SELECT c.idx, s.kind, s.handler_version, count(*) AS n,
       count(*) FILTER (WHERE s.handler_version IS NOT NULL
                          AND runqueue_between_turns(s.id)) AS between_turns,
       sum(count(*)) OVER (PARTITION BY c.idx) AS sampled
  FROM runqueue_priority_classes() AS c
 CROSS JOIN LATERAL (
     SELECT q.id, q.kind, q.handler_version
       FROM runqueue_run q
      WHERE q.priority BETWEEN c.low AND c.high
        -- include: due --
      ORDER BY q.priority, q.created_at
      LIMIT %(cap)s) AS s
 GROUP BY c.idx, s.kind, s.handler_version
 ORDER BY c.idx, s.kind, s.handler_version NULLS FIRST;

-- name: read_lag --
-- Reads from a replica (runqueue.reads): whether this server is a standby,
-- how many seconds of the primary's commits it has not replayed yet, and
-- what it has replayed. Caught up (all received WAL replayed, its WAL
-- receiver running): 0, however long ago the last commit was; otherwise the
-- age of the last commit replayed (NULL: none replayed since it started).
-- Not a standby: 0.
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN 0
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                 AND EXISTS (SELECT FROM pg_stat_wal_receiver) THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
       END,
       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END;

-- name: wal_written --
-- Reads from a replica: where the primary's WAL ends now, past the commit
-- of a write this session just made; a later read of the same staff member
-- goes to the replica only once it has replayed this far.
SELECT pg_current_wal_insert_lsn()::text;
