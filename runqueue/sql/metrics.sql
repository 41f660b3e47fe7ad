-- Prometheus's bounded reads (/metrics).

-- name: metrics_queued --
-- Prometheus and the dashboard, per class: queued runs through the claim index up to %(cap)s,
-- and the longest wait since due among the first %(head)s due runs in claim order (NULL: none).
-- Raw: the ORM cannot put a LIMIT inside a correlated aggregate.
SELECT c.idx,
       (SELECT count(*) FROM (
            SELECT 1 FROM runqueue_run r
             WHERE r.status = 'queued' AND r.priority BETWEEN c.low AND c.high
             LIMIT %(cap)s) AS q) AS queued,
       (SELECT extract(epoch FROM now() - min(h.due_at)) FROM (
            SELECT greatest(r.created_at, coalesce(r.scheduled_for, r.created_at)) AS due_at
              FROM runqueue_run r
             WHERE r.status = 'queued' AND r.priority BETWEEN c.low AND c.high
               AND (r.scheduled_for IS NULL OR r.scheduled_for <= now())
             ORDER BY r.priority, r.created_at
             LIMIT %(head)s) AS h) AS oldest_due_seconds
  FROM runqueue_priority_classes() AS c
 ORDER BY c.idx;

-- name: metrics_leased --
-- Prometheus: running and waiting runs by class, at most %(cap)s per status (the oldest claims;
-- for a run waiting for its user, which holds none, random ids), each status a literal read in
-- its index's order (lease_owner >= '', always true, proves the leased index's guard). Why:
-- docs/decisions/history.md, "Prometheus metrics".
SELECT 'running' AS status, runqueue_priority_class(q.priority) AS idx, count(*) AS n
  FROM (SELECT priority FROM runqueue_run WHERE status = 'running' AND lease_owner >= ''
         ORDER BY claimed_at, id LIMIT %(cap)s) AS q
 GROUP BY 2
UNION ALL
SELECT 'waiting_for_user', runqueue_priority_class(q.priority), count(*)
  FROM (SELECT priority FROM runqueue_run
         WHERE status = 'waiting_for_user' AND lease_owner >= ''
         ORDER BY claimed_at, id LIMIT %(cap)s) AS q
 GROUP BY 2
UNION ALL
-- Waiting runs (children, a signal, a time, an event) through the waiting index by
-- %(waiting_reasons)s: a filter on the status alone reads every run waiting for its user.
SELECT 'waiting', runqueue_priority_class(q.priority), count(*)
  FROM (SELECT priority FROM runqueue_run
         WHERE status = 'waiting' AND wait_reason = ANY(%(waiting_reasons)s::text[])
         ORDER BY wait_reason, id LIMIT %(cap)s) AS q
 GROUP BY 2
UNION ALL
-- A session's pending turns (on_busy "enqueue"): in the line index's order
-- (runqueue_run_pending_place), so read through it.
SELECT 'pending', runqueue_priority_class(q.priority), count(*)
  FROM (SELECT priority FROM runqueue_run WHERE status = 'pending'
         ORDER BY tenant, session_id, place LIMIT %(cap)s) AS q
 GROUP BY 2;

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
