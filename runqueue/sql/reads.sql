-- The console's reads that the ORM cannot write: claim latency, tenants, why
-- runs wait.

-- name: dashboard_hour --
-- The dashboard's hour since %(since)s, from one read of the runs finished in it: per minute and
-- terminal status how many (throughput), and per class the claims' count, p50 and p99 of wait_ms
-- (claim latency). A claim is an event row or its run's row (running: a range of the leased
-- index, lease_owner >= '' proving its guard; succeeded or failed by its handler: one of the
-- hour's finished runs). A literal since lets the planner prune the days. Why:
-- docs/decisions/queue.md, "Claim and success on the run's row".
WITH finished AS MATERIALIZED (
    SELECT r.status, r.finished_at, r.priority, r.claim_event_id, r.claimed_at, r.claim_wait_ms
      FROM runqueue_run r
     WHERE r.status IN ('succeeded', 'failed', 'cancelled') AND r.finished_at >= %(since)s
), claims AS (
    SELECT (e.data->>'priority')::int AS priority, (e.data->>'wait_ms')::float8 AS wait_ms
      FROM runqueue_run_event e
     WHERE e.type = 'run.claimed' AND e.created_at >= %(since)s
    UNION ALL
    SELECT r.priority, r.claim_wait_ms::float8
      FROM runqueue_run r
     WHERE r.status = 'running' AND r.lease_owner >= '' AND r.claimed_at >= %(since)s
    UNION ALL
    SELECT f.priority, f.claim_wait_ms::float8
      FROM finished f
     WHERE f.claim_event_id IS NOT NULL AND f.claimed_at >= %(since)s
)
SELECT runqueue_priority_class(c.priority) AS ci, NULL::timestamptz AS minute, NULL::text AS status,
       count(*) AS n,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY c.wait_ms) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY c.wait_ms) AS p99
  FROM claims c
 GROUP BY 1
UNION ALL
SELECT NULL, date_trunc('minute', f.finished_at), f.status::text, count(*), NULL, NULL
  FROM finished f
 GROUP BY 2, 3;

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

-- name: admin_search_fields --
-- The admin's search: which of the fields it matches exactly hold %(term)s, one probe each,
-- in one statement (each probe is planned over every day's partition).
SELECT EXISTS (SELECT 1 FROM runqueue_run WHERE session_id = %(term)s),
       EXISTS (SELECT 1 FROM runqueue_run WHERE tenant = %(term)s),
       EXISTS (SELECT 1 FROM runqueue_run WHERE principal = %(term)s);

-- name: waiting_by_reason --
-- The dashboard and Prometheus: waiting runs per reason, each counted up to %(cap)s in the
-- waiting index's order (the planner cannot tell one reason from another and read every
-- waiting run per reason). Raw: a LIMIT in a per-reason count.
SELECT r.reason,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run w
             WHERE w.status IN ('waiting', 'waiting_for_user') AND w.wait_reason = r.reason
             ORDER BY w.wait_reason, w.id
             LIMIT %(cap)s) AS q)
  FROM unnest(%(reasons)s::text[]) WITH ORDINALITY AS r(reason, n)
 ORDER BY r.n;

-- name: due_by_handler --
-- Why due runs wait (runqueue.reads.versions): the first %(cap)s due runs of each class in claim
-- order by kind and pinned version, with those between turns; runs no worker claims stay at the
-- head (docs/decisions/run-trees.md, "Versions and rolling deploys").
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
-- The dashboard's kinds and versions: active runs by status, kind and pinned version, at most
-- %(cap)s per status, each in its index's order (as metrics_leased); above the cap a sample
-- that runqueue.reads.versions scales to the status's total.
SELECT 'queued' AS status, q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run WHERE status = 'queued'
         ORDER BY priority, created_at LIMIT %(cap)s) AS q
 GROUP BY 2, 3
UNION ALL
SELECT 'running', q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run
         WHERE status = 'running' AND lease_owner >= ''
         ORDER BY claimed_at, id LIMIT %(cap)s) AS q
 GROUP BY 2, 3
UNION ALL
SELECT 'waiting_for_user', q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run
         WHERE status = 'waiting_for_user' AND lease_owner >= ''
         ORDER BY claimed_at, id LIMIT %(cap)s) AS q
 GROUP BY 2, 3
UNION ALL
SELECT 'waiting', q.kind, q.handler_version, count(*)
  FROM (SELECT kind, handler_version FROM runqueue_run
         WHERE status = 'waiting' AND wait_reason = ANY(%(waiting_reasons)s::text[])
         ORDER BY wait_reason, id LIMIT %(cap)s) AS q
 GROUP BY 2, 3;

-- name: keys_running --
-- Keys at their cap (runqueue.reads.waiting): the concurrency keys of the first %(head)s due
-- runs of each class, each key's running runs of that class counted up to %(cap)s through the
-- key index: only keys whose runs wait, never every running run.
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
