-- Budgets: a call's reservation, settle and refund, a wait for a budget, a
-- pause, and the reads of the dashboard and the metrics.

-- name: budget_reserve --
-- ctx.reserve, in the run's fenced transaction: runqueue_budget_take (waiting for the
-- budget's row) and, when taken, the call counted in budget_reserved. Returns the verdict and
-- the instant it counts at (why that instant: docs/decisions/queue.md, "Budgets").
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
-- A run given back before its handler started (the release's fence): its call was never
-- made, so the request and tokens go back to their bucket (runqueue_budget_refund) and off
-- budget_reserved. Returns whether the ring still held that bucket.
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
WITH moved AS (
    UPDATE runqueue_run r
       SET budget_key = %(budget_key)s,
           budget_tokens = %(budget_tokens)s,
           -- include: give_back --
     WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
       AND r.status = 'running'
       -- include: idle_limit --
    RETURNING r.id, r.lease_epoch
),
-- include: claims_ended --
SELECT * FROM moved;

-- name: budget_pause --
-- Stop every claim and reservation on a budget until %(until)s (a
-- provider's 429 with Retry-After); a pause already longer stays. Returns
-- the pause in force, no row without such a budget.
UPDATE runqueue_budget
   SET paused_until = greatest(coalesce(paused_until, %(until)s), %(until)s)
 WHERE key = %(key)s
RETURNING paused_until;

-- name: budget_windows --
-- The dashboard and the metrics: each budget's use in its window now, its pause, its queued
-- runs (runqueue_run_budget_idx) and those whose call cannot be reserved now. Raw: the window
-- is a function of the ring, which the ORM cannot read.
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
-- Why due runs wait, budgets (runqueue.reads.waiting): per budget and class, the due runs
-- whose call cannot be reserved now, at most %(cap)s per budget read in its index's order.
-- Why: docs/decisions/admin-api.md, "Why due runs wait, named everywhere".
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
