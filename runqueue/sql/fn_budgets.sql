-- Budgets: the ring of a budget's window, and a call's take, settle and refund.

-- function: runqueue_budget_bucket --
-- The bucket of a budget's window that instant "at" falls in: a window is ten buckets and the
-- row keeps eleven, so every window lies within the buckets a reservation counts
-- (docs/decisions/queue.md, "Budgets").
CREATE OR REPLACE FUNCTION runqueue_budget_bucket(per_seconds integer, at timestamptz)
    RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT floor(extract(epoch FROM at) * 10 / per_seconds)::bigint$$;

-- function: runqueue_budget_window --
-- What a budget's ring holds in the eleven buckets up to and including the
-- one of "at": tokens and requests reserved (and settled) in them.
CREATE OR REPLACE FUNCTION runqueue_budget_window(
    b runqueue_budget, at timestamptz, OUT tokens bigint, OUT requests bigint)
    LANGUAGE sql STABLE
    AS $$
SELECT coalesce(sum(u.t), 0)::bigint, coalesce(sum(u.r), 0)::bigint
  FROM unnest(b.ring_buckets, b.ring_tokens, b.ring_requests) AS u(n, t, r)
 WHERE u.n > runqueue_budget_bucket(b.per_seconds, at) - 11
$$;

-- function: runqueue_budget_charge --
-- Add tokens and requests to bucket n of a budget's ring (its row locked by the caller), never
-- resetting a newer bucket: a charge to a bucket that left the ring goes into the newest, a
-- refund to it takes nothing, none below zero (docs/decisions/queue.md, "Budgets").
CREATE OR REPLACE FUNCTION runqueue_budget_charge(
    p_id bigint, n bigint, p_tokens bigint, p_requests bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    held bigint;
    newest bigint;
BEGIN
    SELECT b.ring_buckets[n % 11 + 1], (SELECT max(u) FROM unnest(b.ring_buckets) AS u)
      INTO held, newest
      FROM runqueue_budget b
     WHERE b.id = p_id;
    IF p_tokens < 0 OR p_requests < 0 THEN
        IF held IS DISTINCT FROM n THEN
            RETURN;
        END IF;
    ELSIF n <= newest - 11 THEN
        n := newest;
    END IF;
    UPDATE runqueue_budget
       SET ring_tokens[n % 11 + 1] = greatest(0, CASE WHEN ring_buckets[n % 11 + 1] = n
                                                      THEN ring_tokens[n % 11 + 1] ELSE 0 END
                                                 + p_tokens),
           ring_requests[n % 11 + 1] = greatest(0, CASE WHEN ring_buckets[n % 11 + 1] = n
                                                        THEN ring_requests[n % 11 + 1] ELSE 0 END
                                                   + p_requests),
           ring_buckets[n % 11 + 1] = n
     WHERE id = p_id;
END;
$fn$;

-- function: runqueue_budget_take --
-- Reserve one request and p_tokens on p_key for p_tenant, the row locked to commit: the claim's
-- walk (p_wait false: a locked row is 'busy') and ctx.reserve. Answers 'taken', 'unlimited' or
-- why not (busy, paused, requests, tokens, turn). Why: docs/decisions/queue.md, "Budgets".
CREATE OR REPLACE FUNCTION runqueue_budget_take(
    p_key text, p_tenant text, p_tokens bigint, p_wait boolean) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    b runqueue_budget%ROWTYPE;
    -- The instant the reservation counts at: the claim's now() (its
    -- statement's start, which its run.claimed event carries; a claim never
    -- waits here); a wait for the row (ctx.reserve) counts from when it got
    -- the row, not from its transaction's start, which can be long before.
    at_ts timestamptz := now();
    at_s float8;
    fresh float8;
    used record;
    mine float8;
    other float8;
    share float8;
    unit float8;
    v_seen jsonb;
    v_passes jsonb;
    waiting text[];
    other_tenant text;
    verdict text := 'taken';
BEGIN
    IF p_wait THEN
        SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE;
    ELSE
        SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE SKIP LOCKED;
    END IF;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM runqueue_budget WHERE key = p_key) THEN
            RETURN 'busy';
        END IF;
        RETURN 'unlimited';
    END IF;
    IF p_wait THEN
        at_ts := clock_timestamp();
    END IF;
    at_s := extract(epoch FROM at_ts);
    -- For the caller's record of the reservation (budget_reserve): the same
    -- instant, local to this transaction.
    PERFORM set_config('runqueue.budget_at', at_ts::text, true);
    IF b.paused_until > at_ts THEN
        RETURN 'paused';
    END IF;
    SELECT * INTO used FROM runqueue_budget_window(b, at_ts);
    fresh := at_s - b.per_seconds / 10.0;
    v_seen := b.seen || jsonb_build_object(p_tenant, at_s);
    -- The other tenants with queued runs on the key: a skip scan of
    -- runqueue_run_budget_idx, one probe per tenant.
    WITH RECURSIVE t(tenant) AS (
        (SELECT q.tenant FROM runqueue_run q
          WHERE q.budget_key = p_key AND q.status = 'queued' AND q.budget_key IS NOT NULL
          ORDER BY q.tenant LIMIT 1)
        UNION ALL
        SELECT (SELECT q.tenant FROM runqueue_run q
                 WHERE q.budget_key = p_key AND q.status = 'queued'
                   AND q.budget_key IS NOT NULL AND q.tenant > t.tenant
                 ORDER BY q.tenant LIMIT 1)
          FROM t WHERE t.tenant IS NOT NULL
    )
    SELECT coalesce(array_agg(t.tenant), '{}') INTO waiting
      FROM t WHERE t.tenant IS NOT NULL AND t.tenant <> p_tenant;
    -- One never seen asking counts from now: if no claim reaches its runs
    -- within a bucket (its cap is full, its kind paused, its time not
    -- come), it stops holding the others back.
    FOREACH other_tenant IN ARRAY waiting LOOP
        IF NOT v_seen ? other_tenant THEN
            v_seen := v_seen || jsonb_build_object(other_tenant, at_s);
        END IF;
    END LOOP;
    SELECT array_agg(u) INTO waiting
      FROM unnest(waiting) AS u WHERE (v_seen ->> u)::float8 >= fresh;
    mine := greatest(coalesce((b.passes ->> p_tenant)::float8, b.vtime), b.vtime);
    SELECT min(greatest(coalesce((b.passes ->> u)::float8, b.vtime), b.vtime)) INTO other
      FROM unnest(waiting) AS u;
    IF other IS NOT NULL AND mine > other THEN
        verdict := 'turn';
    ELSIF b.requests IS NOT NULL AND used.requests + 1 > b.requests THEN
        verdict := 'requests';
    ELSIF b.tokens IS NOT NULL AND used.tokens + p_tokens > b.tokens
          AND NOT (used.tokens = 0 AND p_tokens > b.tokens) THEN
        verdict := 'tokens';
    END IF;
    v_passes := b.passes;
    IF verdict = 'taken' THEN
        PERFORM runqueue_budget_charge(
            b.id, runqueue_budget_bucket(b.per_seconds, at_ts), p_tokens, 1);
        share := coalesce((b.shares ->> p_tenant)::float8, 1);
        unit := CASE WHEN b.tokens IS NULL THEN 1.0 / coalesce(b.requests, 1)
                     ELSE p_tokens::float8 / greatest(b.tokens, 1) END;
        v_passes := v_passes || jsonb_build_object(p_tenant, mine + unit / share);
        -- vtime: the least pass of the tenants asking (never back).
        SELECT greatest(b.vtime, min(greatest(coalesce((v_passes ->> u)::float8, b.vtime),
                                             b.vtime)))
          INTO b.vtime
          FROM unnest(coalesce(waiting, '{}') || p_tenant) AS u;
    END IF;
    -- Forget tenants not seen for a window, and passes no ahead of vtime.
    SELECT coalesce(jsonb_object_agg(s.key, s.value), '{}') INTO v_seen
      FROM jsonb_each(v_seen) AS s
     WHERE (s.value #>> '{}')::float8 >= at_s - b.per_seconds;
    SELECT coalesce(jsonb_object_agg(p.key, p.value), '{}') INTO v_passes
      FROM jsonb_each(v_passes) AS p
     WHERE (p.value #>> '{}')::float8 > b.vtime;
    UPDATE runqueue_budget SET seen = v_seen, passes = v_passes, vtime = b.vtime
     WHERE id = b.id;
    RETURN verdict;
END;
$fn$;

-- function: runqueue_budget_settle --
-- Correct a reservation of p_reserved made at p_at to p_used: a refund off its bucket while the
-- ring holds it, an extra charge into the bucket of the moment this got the row, the pass moved
-- too. Returns used - reserved, 0 without a budget (docs/decisions/queue.md, "Budgets").
CREATE OR REPLACE FUNCTION runqueue_budget_settle(
    p_key text, p_tenant text, p_at timestamptz, p_reserved bigint, p_used bigint)
    RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    b runqueue_budget%ROWTYPE;
    delta bigint := p_used - p_reserved;
    share float8;
BEGIN
    SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE;
    IF NOT FOUND OR delta = 0 THEN
        RETURN 0;
    END IF;
    PERFORM runqueue_budget_charge(
        b.id,
        runqueue_budget_bucket(b.per_seconds, CASE WHEN delta < 0 THEN p_at
                                                   ELSE clock_timestamp() END),
        delta, 0);
    IF b.tokens IS NOT NULL THEN
        share := coalesce((b.shares ->> p_tenant)::float8, 1);
        UPDATE runqueue_budget
           SET passes = passes || jsonb_build_object(
                   p_tenant,
                   greatest(coalesce((passes ->> p_tenant)::float8, vtime), vtime)
                   + delta::float8 / greatest(tokens, 1) / share)
         WHERE id = b.id;
    END IF;
    RETURN delta;
END;
$fn$;

-- function: runqueue_budget_refund --
-- Give back a reservation whose call was never made: its request and p_tokens off the bucket
-- of p_at while the ring holds it, the tenant's pass moved back (never below vtime). Returns
-- whether the ring still held it (docs/decisions/queue.md, "Budgets").
CREATE OR REPLACE FUNCTION runqueue_budget_refund(
    p_key text, p_tenant text, p_at timestamptz, p_tokens bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    b runqueue_budget%ROWTYPE;
    n bigint;
    unit float8;
BEGIN
    SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    n := runqueue_budget_bucket(b.per_seconds, p_at);
    IF b.ring_buckets[n % 11 + 1] IS DISTINCT FROM n THEN
        RETURN false;
    END IF;
    PERFORM runqueue_budget_charge(b.id, n, -p_tokens, -1);
    -- The unit runqueue_budget_take added to the pass.
    unit := CASE WHEN b.tokens IS NULL THEN 1.0 / coalesce(b.requests, 1)
                 ELSE p_tokens::float8 / greatest(b.tokens, 1) END;
    UPDATE runqueue_budget
       SET passes = passes || jsonb_build_object(
               p_tenant,
               greatest((passes ->> p_tenant)::float8
                        - unit / coalesce((shares ->> p_tenant)::float8, 1), vtime))
     WHERE id = b.id AND passes ? p_tenant;
    RETURN true;
END;
$fn$;
