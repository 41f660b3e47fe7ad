-- The claim: what a claim writes to a run it takes, the plain and the capped
-- claim, and the statements that only claim.

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
           -- (runqueue_claim_version, fn_claim.sql).
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
-- The last condition of a claim's UPDATE: a statement that only claims (%(claim_commit)s 'off')
-- commits without waiting for its WAL to reach the disk; the lease token makes that safe. An
-- InitPlan, this transaction only (docs/decisions.md, "Claim and leases").
AND (%(claim_commit)s::text IS NULL
     OR (SELECT set_config('synchronous_commit', %(claim_commit)s::text, true)) IS NOT NULL)

-- fragment: claimed_only --
-- The end of claim and claim_capped: one row per claimed run (none when
-- nothing was claimed), the NOTIFYs of the watched ones sent first.
grown AS (SELECT c.id FROM claimed c),
-- include: watched --
SELECT c.*
  FROM claimed c
 WHERE (SELECT count(*) FROM watched) >= 0
 ORDER BY c.priority, c.created_at

-- fragment: plain_claimed --
-- The plain claim (finish_and_claim, claim): up to %(limit)s due runs in
-- the slot group's classes, oldest first within priority. The claim only
-- takes queued rows, so it never touches a row being finished.
-- ARRAY(...) runs the claim's subquery once (IN (SELECT ... LIMIT k) may
-- re-run it and claim more than k). runqueue_priority_class
-- (fn_classes.sql) is the class of a priority, inlined by the planner.
claimed AS (
    UPDATE runqueue_run r
    -- include: claim_set --
     WHERE r.id = ANY(ARRAY(
            SELECT q.id
              FROM runqueue_run q
             WHERE q.priority BETWEEN %(min_priority)s AND %(max_priority)s
               AND runqueue_priority_class(q.priority) = ANY(%(class_indexes)s::int[])
               -- What may be claimed: fn_claim.sql, as runqueue_claim_capped.
               -- include: claimable --
               -- A kind and version this worker has (fn_claim.sql): a
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
-- The capped claim (finish_and_claim_capped, claim_capped): the plain claim but its WHERE, the
-- ids runqueue_claim_capped (fn_claim.sql) chose and locked, run once (an InitPlan); no status
-- test, which would walk the claim index (docs/decisions.md, "Concurrency caps").
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

-- name: claim --
-- A claim with nothing to finish (a wake-up's, leases.claim's): one row per claimed run; finished
-- is empty (claim_after_finishes reads it). No finish CTEs: their executor start-up costs an
-- idle pickup ~0.1 ms (docs/decisions.md, "Claim and leases").
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
