-- Usage and cost: a model call's tokens and cost, its tree's totals and spend
-- cap.

-- name: usage_root --
-- ctx.record_usage's tree: the run's root and the root's session
-- (runqueue_tree_root, fn_tree.sql: a walk up the parents, planned
-- without JIT). No row for a run that does not exist.
SELECT id, session_id FROM runqueue_tree_root(%(run_id)s::uuid);

-- name: record_usage --
-- ctx.record_usage: one model call's record, unfenced (the money was spent) and once per (run,
-- epoch, call), added to its tree's totals under the root's row lock; fenced says the lease was
-- lost. Returns the totals. Why: docs/decisions/run-trees.md, "Usage and cost".
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
-- After a tree's cost reached its spend cap, in the transaction that cancelled its live runs:
-- each keeps a failure record saying why, as an expired run does. Only the runs this
-- transaction cancelled (their new epoch).
UPDATE runqueue_run r
   SET failure = %(failure)s::jsonb
  FROM unnest(%(ids)s::uuid[], %(epochs)s::bigint[]) AS c(id, epoch)
 WHERE r.id = c.id AND r.lease_epoch = c.epoch AND r.status = 'cancelled'
   AND r.id = ANY(%(ids)s::uuid[]);
