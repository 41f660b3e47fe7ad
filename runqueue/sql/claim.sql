-- The claim: what a claim writes to a run it takes, the plain and the capped
-- claim, and the statements that only claim.

-- fragment: claim_set --
-- What a claim writes to each run it takes: running, the next epoch and attempt, the lease, a
-- fresh token, its run.claimed on the row (docs/decisions/queue.md, "Claim and leases").
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
-- A gating InitPlan: the claim runs after the statement's finishes, so their event ids sort
-- below the claims' (why: docs/decisions/queue.md, "Performance").
AND (SELECT count(*) FROM finished) >= 0

-- fragment: claim_pruned --
-- The live partition's statuses, not live_statuses: pruning that implies no partial index's
-- predicate (docs/decisions/history.md, "The layout").
AND r.status IN ('queued', 'running', 'waiting_for_user')

-- fragment: claim_commit --
-- A statement that only claims (%(claim_commit)s 'off') commits without waiting for the disk;
-- the token makes that safe (docs/decisions/queue.md, "Claim and leases").
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
-- The plain claim: up to %(limit)s due runs of the group's classes in claim order; ARRAY(...)
-- runs the subquery once, so never more than k (docs/decisions/queue.md, "Claim and leases").
claimed AS (
    UPDATE runqueue_run r
    -- include: claim_set --
     WHERE r.id = ANY(ARRAY(
            SELECT q.id
              FROM runqueue_run q
             WHERE q.priority BETWEEN %(min_priority)s AND %(max_priority)s
               AND runqueue_priority_class(q.priority) = ANY(%(class_indexes)s::int[])
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
-- The capped claim: the plain claim but its WHERE, the ids runqueue_claim_capped chose and
-- locked (an InitPlan); no status test (docs/decisions/queue.md, "Concurrency caps").
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
