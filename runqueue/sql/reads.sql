-- The console's reads that the ORM cannot write: claim latency, tenants, why
-- runs wait.

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

-- name: waiting_by_reason --
-- The dashboard and Prometheus: runs waiting (waiting, waiting_for_user) per
-- reason, each counted up to %(cap)s through the waiting index (the ORM cannot
-- put a LIMIT in a per-reason count). Its order keeps the index: the planner
-- cannot tell one reason from another, and read every waiting run per reason.
SELECT r.reason,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run w
             WHERE w.status IN ('waiting', 'waiting_for_user') AND w.wait_reason = r.reason
             ORDER BY w.wait_reason, w.id
             LIMIT %(cap)s) AS q)
  FROM unnest(%(reasons)s::text[]) WITH ORDINALITY AS r(reason, n)
 ORDER BY r.n;

-- name: due_by_handler --
-- Why due runs wait (runqueue.reads.versions): the first %(cap)s due runs of each
-- class in claim order (the claim index), by kind and pinned version, with
-- how many of the pinned ones are between turns (runqueue_between_turns,
-- fn_claim.sql) and how many runs of the class were read. Runs no live
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

-- name: active_by_handler --
-- The dashboard's kinds and versions: active runs by status, kind and pinned
-- version, at most %(cap)s runs per status, each read in its index's order
-- (queued: claim order; running, waiting_for_user: the leased index; waiting:
-- the waiting index, by %(waiting_reasons)s, as metrics_leased reads it).
-- Above the cap a status's counts are a sample, which runqueue.reads.versions
-- scales to the status's total.
SELECT 'queued' AS status, q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run WHERE status = 'queued'
         ORDER BY priority, created_at LIMIT %(cap)s) AS q
 GROUP BY 2, 3
UNION ALL
SELECT 'running', q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run WHERE status = 'running'
         ORDER BY id LIMIT %(cap)s) AS q
 GROUP BY 2, 3
UNION ALL
SELECT 'waiting_for_user', q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run WHERE status = 'waiting_for_user'
         ORDER BY id LIMIT %(cap)s) AS q
 GROUP BY 2, 3
UNION ALL
SELECT 'waiting', q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run
         WHERE status = 'waiting' AND wait_reason = ANY(%(waiting_reasons)s::text[])
         ORDER BY wait_reason, id LIMIT %(cap)s) AS q
 GROUP BY 2, 3;

-- name: keys_running --
-- Keys at their cap (runqueue.reads.waiting): the concurrency keys among the
-- first %(head)s due runs of each class in claim order, and each one's running
-- runs of that class counted up to %(cap)s through the key index. Only keys
-- whose runs wait are counted, never every running run.
WITH due AS (
    SELECT DISTINCT c.idx, c.low, c.high, h.concurrency_key AS key
      FROM runqueue_priority_classes() AS c,
           LATERAL (SELECT r.concurrency_key FROM runqueue_run r
                     WHERE r.status = 'queued' AND r.priority BETWEEN c.low AND c.high
                       AND (r.scheduled_for IS NULL OR r.scheduled_for <= now())
                     ORDER BY r.priority, r.created_at LIMIT %(head)s) AS h
)
SELECT d.key, d.idx,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run r
             WHERE r.concurrency_key = d.key AND r.status = 'running'
               AND r.priority BETWEEN d.low AND d.high
             LIMIT %(cap)s) AS q) AS running
  FROM due d
 ORDER BY d.key, d.idx
 LIMIT %(most)s;
