-- New runs: a submit, an API token's quota, a fork.

-- name: create_runs --
-- Submit with no waiting run to deliver to: the runs (a place makes a pending turn), run.created,
-- keys and wake-up NOTIFYs in one statement and one commit; a taken key or session fails it
-- whole and submit routes instead. Why: docs/decisions/sessions.md, "Submit".
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
           -- A run.created that says only the priority is the row's (its id taken
           -- here); the others are event rows (logged). Why: docs/decisions/queue.md,
           -- "Claim and success on the run's row".
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

-- name: take_submit_quota --
-- One submit against an API token's quota (GCRA: the next submit's theoretical arrival time),
-- in one upsert whose row lock serialises a token's submits; a refused one leaves tat as it
-- was, retry_after says when (docs/decisions.md, "HTTP API").
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

-- name: fork_run --
-- runqueue.fork: a new queued run from a finished one, its first %(from_step)s tool records
-- copied under their numbers, run.created and run.forked, a NOTIFY, under the original's lock
-- (lock_run). Raw: one statement, one round trip (docs/decisions.md, "Forking a run").
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
