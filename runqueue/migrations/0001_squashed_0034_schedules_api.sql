-- runqueue's schema as migrations 0001_initial to 0034_schedules_api leave it:
-- what 0001_squashed_0034_schedules_api.py installs on a database that has none
-- of them (its docstring says when Django uses it). Frozen, as every migration
-- is: taken from a database migrated through the 34 (PostgreSQL 15) with
-- pg_dump --schema-only --no-owner --no-privileges -Fc, its pg_restore -l list
-- cut to runqueue's objects less the events' default partition and the day
-- partitions (made at the end, below), pg_restore -L; then the SET lines and
-- the schema name taken out. In pg_dump's order; tests/database/history/
-- test_baseline.py migrates a database each way and compares them.
--
-- Four markers in double braces stand for the project's user model
-- (AUTH_USER_MODEL is swappable), put in at migrate time: user_id_type the
-- type of its key, user_table and user_pk its table and key column, user_fk
-- the name Django gives the foreign key to it.
--
-- Where pg_dump's text would not give the same catalog, it is written as the
-- chain wrote it: a varchar column's IN list (pg_dump's ARRAY form parses into
-- another expression), and the events' default partition made with PARTITION
-- OF, at the end, as 0009_history made it. The day partitions of finished
-- runs and events are made last, at migrate time, as 0009_history made them:
-- today and the three days after.

-- A LANGUAGE sql function's body names tables made further down, as in any
-- pg_dump output (this transaction only).
SET LOCAL check_function_bodies = false;

--
-- Name: runqueue_between_turns(uuid); Type: FUNCTION
--

CREATE FUNCTION runqueue_between_turns(p_run uuid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
SELECT coalesce(c.turn_end, true)
       AND NOT EXISTS (SELECT 1
                         FROM runqueue_tool_invocation t
                        WHERE t.run_id = p_run AND t.seq >= coalesce(c.tool_seq, 0))
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (SELECT k.turn_end, k.tool_seq
                       FROM runqueue_checkpoint k
                      WHERE k.run_id = p_run
                      ORDER BY k.seq DESC
                      LIMIT 1) AS c ON true
$$;

--
-- Name: runqueue_budget_bucket(integer, timestamp with time zone); Type: FUNCTION
--

CREATE FUNCTION runqueue_budget_bucket(per_seconds integer, at timestamp with time zone) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT floor(extract(epoch FROM at) * 10 / per_seconds)::bigint$$;

--
-- Name: runqueue_budget_charge(bigint, bigint, bigint, bigint); Type: FUNCTION
--

CREATE FUNCTION runqueue_budget_charge(p_id bigint, n bigint, p_tokens bigint, p_requests bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
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
$$;

--
-- Name: runqueue_budget_refund(text, text, timestamp with time zone, bigint); Type: FUNCTION
--

CREATE FUNCTION runqueue_budget_refund(p_key text, p_tenant text, p_at timestamp with time zone, p_tokens bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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
$$;

--
-- Name: runqueue_budget_settle(text, text, timestamp with time zone, bigint, bigint); Type: FUNCTION
--

CREATE FUNCTION runqueue_budget_settle(p_key text, p_tenant text, p_at timestamp with time zone, p_reserved bigint, p_used bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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
$$;

--
-- Name: runqueue_budget_take(text, text, bigint, boolean); Type: FUNCTION
--

CREATE FUNCTION runqueue_budget_take(p_key text, p_tenant text, p_tokens bigint, p_wait boolean) RETURNS text
    LANGUAGE plpgsql
    AS $$
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
$$;

--
-- Name: runqueue_budget; Type: TABLE
--

CREATE TABLE runqueue_budget (
    id bigint NOT NULL,
    key character varying(255) NOT NULL,
    requests integer,
    tokens bigint,
    per_seconds integer NOT NULL,
    shares jsonb NOT NULL,
    paused_until timestamp with time zone,
    note character varying(255) NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    ring_buckets bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    ring_tokens bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    ring_requests bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    passes jsonb DEFAULT '{}'::jsonb NOT NULL,
    seen jsonb DEFAULT '{}'::jsonb NOT NULL,
    vtime double precision DEFAULT 0 NOT NULL,
    CONSTRAINT runqueue_budget_key_not_empty CHECK ((NOT ((key)::text = ''::text))),
    CONSTRAINT runqueue_budget_per_seconds_check CHECK ((per_seconds >= 0)),
    CONSTRAINT runqueue_budget_per_seconds_gte_1 CHECK ((per_seconds >= 1)),
    CONSTRAINT runqueue_budget_requests_check CHECK ((requests >= 0)),
    CONSTRAINT runqueue_budget_tokens_check CHECK ((tokens >= 0))
);

--
-- Name: runqueue_budget_window(runqueue_budget, timestamp with time zone); Type: FUNCTION
--

CREATE FUNCTION runqueue_budget_window(b runqueue_budget, at timestamp with time zone, OUT tokens bigint, OUT requests bigint) RETURNS record
    LANGUAGE sql STABLE
    AS $$
SELECT coalesce(sum(u.t), 0)::bigint, coalesce(sum(u.r), 0)::bigint
  FROM unnest(b.ring_buckets, b.ring_tokens, b.ring_requests) AS u(n, t, r)
 WHERE u.n > runqueue_budget_bucket(b.per_seconds, at) - 11
$$;

--
-- Name: runqueue_claim_capped(integer, integer, integer, integer[], integer[], uuid[], bigint[], uuid[], text[], integer[], text[], text[], integer[]); Type: FUNCTION
--

CREATE FUNCTION runqueue_claim_capped(p_limit integer, p_min_priority integer, p_max_priority integer, p_class_indexes integer[], p_default_caps integer[], p_finishing_ids uuid[], p_finishing_epochs bigint[], p_finishing_tokens uuid[], p_kinds text[], p_newest integer[], p_versions text[], p_moves text[], p_move_to integer[]) RETURNS uuid[]
    LANGUAGE plpgsql
    SET cursor_tuple_fraction TO '1'
    AS $$
DECLARE
    chosen uuid[] := '{}';
    -- Runs tried (chosen, or locked by another claimer): never fetched again.
    tried uuid[] := '{}';
    -- Room left per 'class:key' in this call; 0: at its cap, paused, or
    -- being claimed by another claimer (then its 'class:key' is in blocked).
    room jsonb := '{}';
    blocked text[] := '{}';
    -- Budgets stepped over in this call: 'key' (busy or paused: every
    -- tenant) or 'key|tenant' (this tenant's next call does not fit now).
    budgets_blocked text[] := '{}';
    verdict text;
    locked boolean;
    cand_budget text;
    cand_tokens integer;
    at_priority integer := -1;
    at_created timestamptz := '-infinity';
    by_key boolean := false;
    switch boolean;
    skipped integer := 0;
    fetched integer;
    candidates refcursor;
    cand record;
    pair text;
    cap integer;
    free integer;
BEGIN
    IF p_limit < 1 THEN
        RETURN chosen;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'runqueue: a capped claim needs READ COMMITTED, not %',
            current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported';
    END IF;
    LOOP
        fetched := 0;
        switch := false;
        IF NOT by_key THEN
            -- The claim's own order from where the walk stands (the runs
            -- before it were all tried or stepped over), 64 at a time.
            OPEN candidates FOR
                SELECT q.id, q.priority, q.created_at, q.concurrency_key AS key,
                       runqueue_priority_class(q.priority) AS cls,
                       q.tenant, q.budget_key, q.budget_tokens
                  FROM runqueue_run q
                 WHERE q.priority BETWEEN p_min_priority AND p_max_priority
                   AND runqueue_priority_class(q.priority) = ANY(p_class_indexes)
                   AND (q.priority, q.created_at) >= (at_priority, at_created)
                   AND q.id <> ALL(tried)
                   -- A budget stepped over is not read again in this call.
                   AND (q.budget_key IS NULL
                        OR NOT (q.budget_key = ANY(budgets_blocked)
                                OR (q.budget_key || '|' || q.tenant) = ANY(budgets_blocked)))
                   -- Claimable: due, not past its start deadline (start_within: the deadline
                   -- service cancels it as expired, docs/decisions.md "Run deadlines"), and
                   -- its kind not paused (in all classes, or in its class). The pause test
                   -- is a subplan per candidate run, never a join: OFFSET 0 keeps the planner
                   -- from pulling it up into an anti-join, which it may make a hash join when
                   -- runqueue_paused_kind has no statistics (never analyzed: a table nobody
                   -- paused a kind in), and a hash join's rows come unordered: the claim would
                   -- sort every due run instead of reading the claim index's first few
                   -- (docs/performance.md, "A claim's plan whatever the statistics").
                   -- Due: queued, its time come (on the database clock), attempts left, and
                   -- not paused (runqueue.pausing.pause_run: a column on the row already read,
                   -- never a read of another table).
                   AND q.status = 'queued'
                   AND (q.scheduled_for IS NULL OR q.scheduled_for <= now())
                   AND q.attempts < q.max_attempts
                   AND q.paused_at IS NULL
                   AND (q.start_by IS NULL OR q.start_by > now())
                   AND NOT EXISTS (SELECT 1 FROM runqueue_paused_kind p
                                    WHERE p.kind = q.kind
                                      AND (p.priority_class IS NULL
                                           OR p.priority_class
                                              = runqueue_priority_class_low(
                                                    runqueue_priority_class(q.priority)))
                                   OFFSET 0)
                   -- A kind and version this worker has (functions.sql).
                   AND runqueue_claim_version(q.id, q.kind, q.handler_version, p_kinds,
                                              p_newest, p_versions, p_moves,
                                              p_move_to) IS NOT NULL
                 ORDER BY q.priority, q.created_at
                 LIMIT 64;
        ELSE
            -- Key by key: the next runs of each (key, class) not stepped
            -- over, merged in claim order, p_limit at a time. Each key's
            -- runs must come from runqueue_run_key_idx, never from a walk of
            -- the claim index filtered by key (the backlog this mode is for):
            -- the key is a range of one, not an equality, so the ORDER BY
            -- keeps it and only that index gives the order without a sort.
            OPEN candidates FOR
                WITH RECURSIVE keys(key) AS (
                    (SELECT q.concurrency_key
                       FROM runqueue_run q
                      WHERE q.status = 'queued' AND q.concurrency_key >= ''
                        AND q.priority BETWEEN p_min_priority AND p_max_priority
                      ORDER BY q.concurrency_key
                      LIMIT 1)
                    UNION ALL
                    SELECT (SELECT q.concurrency_key
                              FROM runqueue_run q
                             WHERE q.status = 'queued' AND q.concurrency_key > keys.key
                               AND q.priority BETWEEN p_min_priority AND p_max_priority
                             ORDER BY q.concurrency_key
                             LIMIT 1)
                      FROM keys
                     WHERE keys.key IS NOT NULL
                )
                SELECT h.id, h.priority, h.created_at, h.key, h.cls,
                       h.tenant, h.budget_key, h.budget_tokens
                  FROM keys
                 CROSS JOIN unnest(p_class_indexes) AS c(cls)
                 CROSS JOIN LATERAL (
                     SELECT q.id, q.priority, q.created_at, q.concurrency_key AS key, c.cls,
                            q.tenant, q.budget_key, q.budget_tokens
                       FROM runqueue_run q
                      WHERE q.concurrency_key >= keys.key AND q.concurrency_key <= keys.key
                        AND q.priority BETWEEN greatest(runqueue_priority_class_low(c.cls), p_min_priority)
                                           AND least(runqueue_priority_class_high(c.cls), p_max_priority)
                        AND (q.priority, q.created_at) >= (at_priority, at_created)
                        AND q.id <> ALL(tried)
                        AND (q.budget_key IS NULL
                             OR NOT (q.budget_key = ANY(budgets_blocked)
                                     OR (q.budget_key || '|' || q.tenant) = ANY(budgets_blocked)))
                        -- A paused kind is not filtered here: the lock's
                        -- re-check below does it.
                        -- Due: queued, its time come (on the database clock), attempts left, and
                        -- not paused (runqueue.pausing.pause_run: a column on the row already read,
                        -- never a read of another table).
                        AND q.status = 'queued'
                        AND (q.scheduled_for IS NULL OR q.scheduled_for <= now())
                        AND q.attempts < q.max_attempts
                        AND q.paused_at IS NULL
                        AND runqueue_claim_version(q.id, q.kind, q.handler_version, p_kinds,
                                                   p_newest, p_versions, p_moves,
                                                   p_move_to) IS NOT NULL
                      ORDER BY q.concurrency_key, q.status, q.priority, q.created_at
                      LIMIT p_limit) AS h
                 WHERE keys.key IS NOT NULL
                   AND (c.cls || ':' || keys.key) <> ALL(blocked)
                 ORDER BY h.priority, h.created_at
                 LIMIT p_limit;
        END IF;
        LOOP
            FETCH candidates INTO cand;
            EXIT WHEN NOT FOUND;
            fetched := fetched + 1;
            at_priority := cand.priority;
            at_created := cand.created_at;
            IF (cand.cls || ':' || cand.key) = ANY(blocked)
               OR cand.budget_key = ANY(budgets_blocked)
               OR (cand.budget_key || '|' || cand.tenant) = ANY(budgets_blocked) THEN
                skipped := skipped + 1;
                IF NOT by_key AND skipped > 256 THEN
                    by_key := true;
                    switch := true;
                    EXIT;
                END IF;
                CONTINUE;
            END IF;
            pair := cand.cls || ':' || cand.key;
            free := (room ->> pair)::integer;
            IF free IS NULL THEN
                SELECT l.max_running INTO cap
                  FROM runqueue_concurrency_limit l
                 WHERE l.key = cand.key
                   AND l.priority_class = runqueue_priority_class_low(cand.cls);
                IF NOT FOUND THEN
                    cap := p_default_caps[cand.cls + 1];
                END IF;
                IF cap IS NULL THEN
                    free := p_limit;
                ELSIF cap = 0
                      OR NOT pg_try_advisory_xact_lock(
                          hashtextextended('runqueue.concurrency:' || pair, 0)) THEN
                    free := 0;
                ELSE
                    -- A fresh snapshot, taken with the lock held. The runs
                    -- this statement finishes are not counted: they leave
                    -- running in the same commit, and no other claim of this
                    -- (key, class) can move a run into running before it.
                    SELECT cap - count(*) INTO free
                      FROM runqueue_run r
                     WHERE r.status = 'running'
                       AND r.concurrency_key = cand.key
                       AND r.priority BETWEEN runqueue_priority_class_low(cand.cls)
                                          AND runqueue_priority_class_high(cand.cls)
                       AND NOT EXISTS (
                           SELECT 1
                             FROM unnest(p_finishing_ids, p_finishing_epochs,
                                         p_finishing_tokens) AS f(id, epoch, token)
                            WHERE f.id = r.id AND f.epoch = r.lease_epoch
                              AND f.token = r.lease_token);
                END IF;
                room := room || jsonb_build_object(pair, free);
            END IF;
            IF free <= 0 THEN
                -- Step over this (key, class) from here on.
                blocked := blocked || pair;
                skipped := skipped + 1;
                -- A long backlog of it ahead: go key by key from here on.
                IF NOT by_key THEN
                    SELECT count(*) >= 64 INTO by_key
                      FROM (SELECT 1
                              FROM runqueue_run q
                             WHERE q.status = 'queued'
                               AND q.concurrency_key = cand.key
                               AND q.priority BETWEEN runqueue_priority_class_low(cand.cls)
                                                  AND runqueue_priority_class_high(cand.cls)
                               AND (q.priority, q.created_at) >= (cand.priority, cand.created_at)
                             LIMIT 64) AS backlog;
                    IF by_key THEN
                        switch := true;
                        EXIT;
                    END IF;
                END IF;
                CONTINUE;
            END IF;
            -- Lock the chosen run, re-checked on its latest version; one
            -- another claimer holds is stepped over.
            tried := tried || cand.id;
            -- Its budget is read from the locked version too: a run given
            -- back to wait for a budget since the candidates were read has
            -- one now.
            SELECT q.budget_key, q.budget_tokens INTO cand_budget, cand_tokens
              FROM runqueue_run q
             WHERE q.id = cand.id
               -- Claimable: due, not past its start deadline (start_within: the deadline
               -- service cancels it as expired, docs/decisions.md "Run deadlines"), and
               -- its kind not paused (in all classes, or in its class). The pause test
               -- is a subplan per candidate run, never a join: OFFSET 0 keeps the planner
               -- from pulling it up into an anti-join, which it may make a hash join when
               -- runqueue_paused_kind has no statistics (never analyzed: a table nobody
               -- paused a kind in), and a hash join's rows come unordered: the claim would
               -- sort every due run instead of reading the claim index's first few
               -- (docs/performance.md, "A claim's plan whatever the statistics").
               -- Due: queued, its time come (on the database clock), attempts left, and
               -- not paused (runqueue.pausing.pause_run: a column on the row already read,
               -- never a read of another table).
               AND q.status = 'queued'
               AND (q.scheduled_for IS NULL OR q.scheduled_for <= now())
               AND q.attempts < q.max_attempts
               AND q.paused_at IS NULL
               AND (q.start_by IS NULL OR q.start_by > now())
               AND NOT EXISTS (SELECT 1 FROM runqueue_paused_kind p
                                WHERE p.kind = q.kind
                                  AND (p.priority_class IS NULL
                                       OR p.priority_class
                                          = runqueue_priority_class_low(
                                                runqueue_priority_class(q.priority)))
                               OFFSET 0)
               -- Its pin read again: a claim and a release since the
               -- candidates were read may have moved it to another version.
               AND runqueue_claim_version(q.id, q.kind, q.handler_version, p_kinds,
                                          p_newest, p_versions, p_moves,
                                          p_move_to) IS NOT NULL
               FOR NO KEY UPDATE SKIP LOCKED;
            locked := FOUND;
            IF locked AND cand_budget IS NOT NULL THEN
                -- A budgeted run is chosen only once its call is reserved
                -- (docs/decisions.md, "Budgets"); else it stays queued (its
                -- row lock ends with this statement) and the walk goes on.
                verdict := runqueue_budget_take(cand_budget, cand.tenant, cand_tokens, false);
                IF verdict IN ('busy', 'paused') THEN
                    budgets_blocked := budgets_blocked || cand_budget;
                ELSIF verdict NOT IN ('taken', 'unlimited') THEN
                    budgets_blocked := budgets_blocked || (cand_budget || '|' || cand.tenant);
                END IF;
                IF verdict NOT IN ('taken', 'unlimited') THEN
                    skipped := skipped + 1;
                    CONTINUE;
                END IF;
            END IF;
            IF locked THEN
                chosen := chosen || cand.id;
                room := room || jsonb_build_object(pair, free - 1);
                IF cardinality(chosen) >= p_limit THEN
                    CLOSE candidates;
                    RETURN chosen;
                END IF;
            END IF;
        END LOOP;
        CLOSE candidates;
        -- Go on while the last batch was full (a walk window) or gave
        -- anything (key by key: what it gave is tried or stepped over now).
        EXIT WHEN NOT (switch OR (by_key AND fetched > 0) OR fetched = 64);
    END LOOP;
    RETURN chosen;
END;
$$;

--
-- Name: runqueue_claim_version(uuid, text, integer, text[], integer[], text[], text[], integer[]); Type: FUNCTION
--

CREATE FUNCTION runqueue_claim_version(p_run uuid, p_kind text, p_pinned integer, p_kinds text[], p_newest integer[], p_versions text[], p_moves text[], p_move_to integer[]) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
SELECT CASE
           WHEN NOT (p_kind = ANY(p_kinds)) THEN NULL
           WHEN p_pinned IS NULL THEN p_newest[array_position(p_kinds, p_kind)]
           WHEN (p_kind || ':' || p_pinned) = ANY(p_moves) AND runqueue_between_turns(p_run)
               THEN p_move_to[array_position(p_moves, p_kind || ':' || p_pinned)]
           WHEN (p_kind || ':' || p_pinned) = ANY(p_versions) THEN p_pinned
       END
$$;

--
-- Name: runqueue_claimed_data(text, uuid, integer, integer, integer); Type: FUNCTION
--

CREATE FUNCTION runqueue_claimed_data(p_owner text, p_token uuid, p_attempt integer, p_priority integer, p_wait_ms integer) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
SELECT jsonb_build_object(
           'owner', p_owner,
           'token', p_token,
           'attempt', p_attempt,
           'priority', p_priority,
           'wait_ms', p_wait_ms)
$$;

--
-- Name: runqueue_event_notify(); Type: FUNCTION
--

CREATE FUNCTION runqueue_event_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = NEW.run_id) THEN
        PERFORM pg_notify('runqueue_events', NEW.run_id::text);
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: runqueue_join(uuid[], text); Type: FUNCTION
--

CREATE FUNCTION runqueue_join(p_parents uuid[], p_channel text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    IF p_parents IS NULL OR cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Every run of p_parents locked, in id order, live or dead-lettered (a dead
    -- letter may be requeued; succeeded and cancelled runs never change): the
    -- live ones first, from the live partition alone, then, only if some were
    -- not there, the dead letters among the others (a probe of every finished
    -- day). A dead letter requeued between the two is live and unlocked here;
    -- the count's UPDATE locks it.
    SELECT array_agg(l.id) INTO held
      FROM (SELECT r.id
              FROM runqueue_run r
             WHERE r.id = ANY(p_parents)
               AND r.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   )
             ORDER BY r.id
               FOR NO KEY UPDATE) AS l;
    IF coalesce(cardinality(held), 0)
       < (SELECT count(DISTINCT p.id) FROM unnest(p_parents) AS p(id) WHERE p.id IS NOT NULL) THEN
        PERFORM 1
           FROM runqueue_run r
          WHERE r.id = ANY(p_parents) AND r.id <> ALL(coalesce(held, '{}'))
            AND r.status = 'failed'
          ORDER BY r.id
            FOR NO KEY UPDATE;
    END IF;
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN (
           -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
           'queued', 'running', 'waiting_for_user', 'waiting'
           );
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET input = NULL,
               timed_out = false,
               -- The resume of a waiting run (the end of a SET list, after its input and
               -- timed_out; alias r): queued, due now, a new epoch, a fresh attempt
               -- budget for the new turn, no wait and no lease.
               status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               wait_reason = '',
               wait_name = '',
               wait_match = NULL,
               waiting_since = NULL,
               wait_until = NULL,
               lease_owner = '',
               lease_token = NULL,
               lease_expires_at = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$$;

--
-- Name: runqueue_priority_class(integer); Type: FUNCTION
--

CREATE FUNCTION runqueue_priority_class(priority integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT least(priority / 10, 2)$$;

--
-- Name: runqueue_priority_class_high(integer); Type: FUNCTION
--

CREATE FUNCTION runqueue_priority_class_high(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 9 WHEN 1 THEN 19 WHEN 2 THEN 32767 END$$;

--
-- Name: runqueue_priority_class_low(integer); Type: FUNCTION
--

CREATE FUNCTION runqueue_priority_class_low(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 0 WHEN 1 THEN 10 WHEN 2 THEN 20 END$$;

--
-- Name: runqueue_priority_classes(); Type: FUNCTION
--

CREATE FUNCTION runqueue_priority_classes() RETURNS TABLE(idx integer, low integer, high integer)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$VALUES (0, 0, 9), (1, 10, 19), (2, 20, 32767)$$;

--
-- Name: runqueue_promote(text[], text[], text); Type: FUNCTION
--

CREATE FUNCTION runqueue_promote(p_tenants text[], p_sessions text[], p_channel text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    s record;
    next_id uuid;
    promoted integer := 0;
BEGIN
    IF p_sessions IS NULL OR cardinality(p_sessions) = 0 THEN
        RETURN 0;
    END IF;
    FOR s IN
        SELECT DISTINCT t.tenant, t.session_id
          FROM unnest(p_tenants, p_sessions) AS t(tenant, session_id)
         WHERE t.session_id IS NOT NULL
         ORDER BY t.tenant, t.session_id
    LOOP
        -- Through runqueue_run_one_active_per_session: the session's line
        -- waits while it has an active run.
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM runqueue_run a
             WHERE a.tenant = s.tenant AND a.session_id = s.session_id
               AND a.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   ));
        -- Through runqueue_run_pending_place, in line order.
        SELECT p.id INTO next_id
          FROM runqueue_run p
         WHERE p.tenant = s.tenant AND p.session_id = s.session_id AND p.status = 'pending'
         ORDER BY p.place
         LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        WITH queued AS (
            UPDATE runqueue_run r
               SET status = 'queued',
                   scheduled_for = greatest(coalesce(r.scheduled_for, now()), now())
             WHERE r.id = next_id AND r.status = 'pending'
            RETURNING r.id, r.lease_epoch, r.place
        )
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT q.id, 'run.promoted', q.lease_epoch, jsonb_build_object('place', q.place), now()
          FROM queued q;
        IF FOUND THEN
            PERFORM pg_notify(p_channel, '');
            promoted := promoted + 1;
        END IF;
    END LOOP;
    RETURN promoted;
END;
$$;

--
-- Name: runqueue_recount(uuid[], text); Type: FUNCTION
--

CREATE FUNCTION runqueue_recount(p_parents uuid[], p_channel text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    p_parents := array_remove(p_parents, NULL);
    IF cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Every run of p_parents locked, in id order, live or dead-lettered (a dead
    -- letter may be requeued; succeeded and cancelled runs never change): the
    -- live ones first, from the live partition alone, then, only if some were
    -- not there, the dead letters among the others (a probe of every finished
    -- day). A dead letter requeued between the two is live and unlocked here;
    -- the count's UPDATE locks it.
    SELECT array_agg(l.id) INTO held
      FROM (SELECT r.id
              FROM runqueue_run r
             WHERE r.id = ANY(p_parents)
               AND r.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   )
             ORDER BY r.id
               FOR NO KEY UPDATE) AS l;
    IF coalesce(cardinality(held), 0)
       < (SELECT count(DISTINCT p.id) FROM unnest(p_parents) AS p(id) WHERE p.id IS NOT NULL) THEN
        PERFORM 1
           FROM runqueue_run r
          WHERE r.id = ANY(p_parents) AND r.id <> ALL(coalesce(held, '{}'))
            AND r.status = 'failed'
          ORDER BY r.id
            FOR NO KEY UPDATE;
    END IF;
    UPDATE runqueue_run r
       SET children_open =
           -- How many children of run r are open: the live partition's parent index.
           (SELECT count(*)::integer
              FROM runqueue_run c
             WHERE c.parent_id = r.id
               AND c.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   ))
     WHERE r.id = ANY(p_parents)
       AND r.status IN (
           -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
           'queued', 'running', 'waiting_for_user', 'waiting'
           );
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET input = NULL,
               timed_out = false,
               -- The resume of a waiting run (the end of a SET list, after its input and
               -- timed_out; alias r): queued, due now, a new epoch, a fresh attempt
               -- budget for the new turn, no wait and no lease.
               status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               wait_reason = '',
               wait_name = '',
               wait_match = NULL,
               waiting_since = NULL,
               wait_until = NULL,
               lease_owner = '',
               lease_token = NULL,
               lease_expires_at = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$$;

--
-- Name: runqueue_run_log_kept(); Type: FUNCTION
--

CREATE FUNCTION runqueue_run_log_kept() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.claim_event_id IS NOT NULL THEN
        INSERT INTO runqueue_run_event (id, run_id, type, lease_epoch, data, created_at)
        VALUES (OLD.claim_event_id, OLD.id, 'run.claimed', OLD.lease_epoch,
                runqueue_claimed_data(OLD.lease_owner, OLD.lease_token, OLD.attempts,
                                      OLD.priority, OLD.claim_wait_ms),
                OLD.claimed_at);
        NEW.claim_event_id := NULL;
        NEW.claimed_at := NULL;
        NEW.claim_wait_ms := NULL;
    END IF;
    IF OLD.success_event_id IS NOT NULL THEN
        INSERT INTO runqueue_run_event (id, run_id, type, lease_epoch, data, created_at)
        VALUES (OLD.success_event_id, OLD.id, 'run.succeeded', OLD.lease_epoch,
                jsonb_build_object('attempt', OLD.attempts), OLD.finished_at);
        NEW.success_event_id := NULL;
    END IF;
    RETURN NEW;
END
$$;

--
-- Name: runqueue_tree_root(uuid); Type: FUNCTION
--

CREATE FUNCTION runqueue_tree_root(p_run uuid) RETURNS TABLE(id uuid, session_id text)
    LANGUAGE plpgsql STABLE
    SET jit TO 'off'
    AS $$
BEGIN
RETURN QUERY
WITH RECURSIVE up(id, parent_id, session_id, depth) AS (
    SELECT r.id, r.parent_id, r.session_id, 0
      FROM runqueue_run r
     WHERE r.id = p_run
    UNION ALL
    SELECT r.id, r.parent_id, r.session_id, u.depth + 1
      FROM up u
      JOIN runqueue_run r ON r.id = u.parent_id
     WHERE u.depth < 10000
)
SELECT up.id, up.session_id::text FROM up ORDER BY up.depth DESC LIMIT 1;
END
$$;

--
-- Name: runqueue_webhook_enqueue(uuid, text, text, text, text, text, jsonb); Type: FUNCTION
--

CREATE FUNCTION runqueue_webhook_enqueue(p_run uuid, p_tenant text, p_principal text, p_kind text, p_type text, p_message text, p_data jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    target record;
    delivery bigint;
    attempt uuid;
    body jsonb := jsonb_build_object(
        'type', p_type,
        'timestamp', to_char(statement_timestamp() AT TIME ZONE 'UTC',
                             'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'data', p_data);
BEGIN
    FOR target IN
        SELECT e.id AS endpoint_id, e.url, e.max_attempts
          FROM runqueue_webhook_endpoint e
         WHERE e.active AND e.subscribed
           AND (e.tenant = '' OR e.tenant = p_tenant)
           AND (jsonb_array_length(e.kinds) = 0 OR e.kinds ? p_kind)
           AND (jsonb_array_length(e.event_types) = 0 OR e.event_types ? p_type)
           AND (e.token_id IS NULL
                OR (e.principal = p_principal
                    AND EXISTS (SELECT 1 FROM runqueue_api_token t
                                 WHERE t.id = e.token_id AND t.revoked_at IS NULL
                                   AND t.tenant = p_tenant)))
        UNION
        SELECT e.id, w.url, e.max_attempts
          FROM runqueue_webhook_target w
          JOIN runqueue_webhook_endpoint e ON e.id = w.endpoint_id
         WHERE w.run_id = p_run AND e.active
           AND (jsonb_array_length(e.event_types) = 0 OR e.event_types ? p_type)
    LOOP
        attempt := gen_random_uuid();
        INSERT INTO runqueue_webhook_delivery (endpoint_id, url, run_id, event_type,
                                               message_id, body, attempt_run_id)
        VALUES (target.endpoint_id, target.url, p_run, p_type, p_message, body, attempt)
        ON CONFLICT (endpoint_id, url, message_id) DO NOTHING
        RETURNING id INTO delivery;
        IF delivery IS NOT NULL THEN
            INSERT INTO runqueue_run (id, tenant, principal, kind, payload, status, priority,
                                      attempts, max_attempts, lease_epoch, lease_owner,
                                      traceparent, concurrency_key, created_event_id)
            VALUES (attempt, 'runqueue', '', 'runqueue.webhook',
                    jsonb_build_object('delivery', delivery), 'queued', 20, 0,
                    target.max_attempts, 0, '', '', 'runqueue',
                    nextval('runqueue_run_event_id_seq'));
        END IF;
        delivery := NULL;
    END LOOP;
END
$$;

--
-- Name: runqueue_webhook_event(); Type: FUNCTION
--

CREATE FUNCTION runqueue_webhook_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM runqueue_webhook_endpoint WHERE active) THEN
        RETURN NULL;
    END IF;
    SELECT id, tenant, principal, kind, session_id, status INTO r
      FROM runqueue_run WHERE id = NEW.run_id;
    IF FOUND AND r.kind <> 'runqueue.webhook' THEN
        PERFORM runqueue_webhook_enqueue(
            r.id, r.tenant, r.principal, r.kind, NEW.type,
            'msg_' || replace(r.id::text, '-', '') || '_uncertain_' || NEW.id,
            jsonb_build_object(
                'run', r.id, 'kind', r.kind, 'tenant', r.tenant, 'session_id', r.session_id,
                'status', r.status, 'lease_epoch', NEW.lease_epoch, 'event', NEW.id,
                'seq', NEW.data->'seq'));
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: runqueue_webhook_run(); Type: FUNCTION
--

CREATE FUNCTION runqueue_webhook_run() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    event text := CASE NEW.status WHEN 'waiting_for_user' THEN 'run.waiting_for_user'
                                  ELSE 'run.' || NEW.status END;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM runqueue_webhook_endpoint WHERE active) THEN
        RETURN NEW;
    END IF;
    PERFORM runqueue_webhook_enqueue(
        NEW.id, NEW.tenant, NEW.principal, NEW.kind, event,
        'msg_' || replace(NEW.id::text, '-', '') || '_' || NEW.status || '_' || NEW.lease_epoch,
        jsonb_build_object(
            'run', NEW.id, 'kind', NEW.kind, 'tenant', NEW.tenant,
            'session_id', NEW.session_id, 'status', NEW.status, 'attempts', NEW.attempts,
            'lease_epoch', NEW.lease_epoch, 'finished_at', NEW.finished_at)
        || CASE WHEN NEW.status <> 'succeeded' THEN '{}'::jsonb
                WHEN octet_length(NEW.result::text) > 65536
                THEN jsonb_build_object('result_omitted', true)
                ELSE jsonb_build_object('result', NEW.result) END
        || CASE WHEN NEW.failure IS NULL OR NEW.status NOT IN ('failed', 'cancelled')
                THEN '{}'::jsonb
                ELSE jsonb_build_object('failure', NEW.failure - 'traceback') END);
    RETURN NEW;
END
$$;

--
-- Name: runqueue_webhook_sync(); Type: FUNCTION
--

CREATE FUNCTION runqueue_webhook_sync() RETURNS trigger
    LANGUAGE plpgsql
    SET lock_timeout TO '10s'
    AS $_$
DECLARE
    wanted boolean;
    present boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('runqueue_webhook_sync'));
    wanted := EXISTS (SELECT 1 FROM runqueue_webhook_endpoint WHERE active);
    present := EXISTS (SELECT 1 FROM pg_trigger
                        WHERE tgrelid = 'runqueue_run'::regclass
                          AND tgname = 'runqueue_run_webhook');
    IF wanted AND NOT present THEN
        EXECUTE $ddl$
            CREATE TRIGGER runqueue_run_webhook
            BEFORE UPDATE ON runqueue_run
            FOR EACH ROW
            WHEN (OLD.status IS DISTINCT FROM NEW.status
                  AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'waiting_for_user')
                  AND NEW.kind <> 'runqueue.webhook')
            EXECUTE FUNCTION runqueue_webhook_run()
        $ddl$;
    ELSIF present AND NOT wanted THEN
        EXECUTE 'DROP TRIGGER runqueue_run_webhook ON runqueue_run';
    END IF;
    RETURN NULL;
END
$_$;

--
-- Name: runqueue_api_token; Type: TABLE
--

CREATE TABLE runqueue_api_token (
    id bigint NOT NULL,
    name character varying(255) NOT NULL,
    tenant character varying(255) NOT NULL,
    prefix character varying(16) NOT NULL,
    key_hash character varying(64) NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    last_used_at timestamp with time zone,
    revoked_at timestamp with time zone,
    user_id {{user_id_type}} NOT NULL,
    max_priority_class smallint NOT NULL,
    submit_quota integer,
    submit_window_seconds integer NOT NULL,
    CONSTRAINT runqueue_api_token_class_valid CHECK ((max_priority_class = ANY (ARRAY[0, 10, 20]))),
    CONSTRAINT runqueue_api_token_submit_quota_check CHECK ((submit_quota >= 0)),
    CONSTRAINT runqueue_api_token_submit_window_seconds_check CHECK ((submit_window_seconds >= 0)),
    CONSTRAINT runqueue_api_token_window_gte_1 CHECK ((submit_window_seconds >= 1))
);

--
-- Name: runqueue_api_token_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_api_token ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_api_token_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_api_token_quota; Type: TABLE
--

CREATE TABLE runqueue_api_token_quota (
    token_id bigint NOT NULL,
    tat timestamp with time zone NOT NULL,
    admitted boolean NOT NULL
);

--
-- Name: runqueue_budget_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_budget ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_budget_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_checkpoint; Type: TABLE
--

CREATE TABLE runqueue_checkpoint (
    id bigint NOT NULL,
    seq integer NOT NULL,
    state jsonb NOT NULL,
    tool_seq integer NOT NULL,
    lease_epoch bigint NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    run_id uuid NOT NULL,
    turn_end boolean DEFAULT false NOT NULL
);

--
-- Name: runqueue_checkpoint_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_checkpoint ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_checkpoint_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_concurrency_limit; Type: TABLE
--

CREATE TABLE runqueue_concurrency_limit (
    id bigint NOT NULL,
    key character varying(255) NOT NULL,
    priority_class smallint NOT NULL,
    max_running integer NOT NULL,
    note character varying(255) NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT runqueue_concurrency_limit_class_valid CHECK ((priority_class = ANY (ARRAY[0, 10, 20]))),
    CONSTRAINT runqueue_concurrency_limit_key_not_empty CHECK ((NOT ((key)::text = ''::text))),
    CONSTRAINT runqueue_concurrency_limit_max_running_check CHECK ((max_running >= 0))
);

--
-- Name: runqueue_concurrency_limit_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_concurrency_limit ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_concurrency_limit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_event_delivery; Type: TABLE
--

CREATE TABLE runqueue_event_delivery (
    id bigint NOT NULL,
    delivered_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    run_id uuid NOT NULL,
    event_id bigint NOT NULL
);

--
-- Name: runqueue_event_delivery_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_event_delivery ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_event_delivery_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_run; Type: TABLE
--

CREATE TABLE runqueue_run (
    id uuid NOT NULL,
    tenant character varying(255) NOT NULL,
    principal character varying(255) NOT NULL,
    session_id character varying(255),
    kind character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    status character varying(20) NOT NULL,
    priority smallint NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    scheduled_for timestamp with time zone,
    lease_epoch bigint NOT NULL,
    lease_owner character varying(255) NOT NULL,
    lease_expires_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    input jsonb,
    failure jsonb,
    result jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    traceparent character varying(55) DEFAULT ''::character varying NOT NULL,
    concurrency_key character varying(255) NOT NULL,
    lease_token uuid,
    budget_key character varying(255),
    budget_reserved bigint DEFAULT 0 NOT NULL,
    budget_tokens integer,
    budget_used bigint DEFAULT 0 NOT NULL,
    children_open integer DEFAULT 0 NOT NULL,
    parent_id uuid,
    timed_out boolean DEFAULT false NOT NULL,
    wait_name character varying(255) DEFAULT ''::character varying NOT NULL,
    wait_reason character varying(16) DEFAULT ''::character varying NOT NULL,
    wait_until timestamp with time zone,
    waiting_since timestamp with time zone,
    start_by timestamp with time zone,
    max_duration double precision,
    forked_from_id uuid,
    interrupted_id uuid,
    place bigint,
    handler_version integer,
    claim_event_id bigint,
    claimed_at timestamp with time zone,
    claim_wait_ms integer,
    success_event_id bigint,
    created_event_id bigint,
    turn jsonb,
    wait_match jsonb,
    paused_at timestamp with time zone,
    CONSTRAINT runqueue_run_attempts_in_range CHECK (((attempts >= 0) AND (attempts <= max_attempts))),
    CONSTRAINT runqueue_run_budget_declared CHECK (((budget_key IS NULL) OR ((budget_tokens >= 0) AND (budget_tokens IS NOT NULL)))),
    CONSTRAINT runqueue_run_children_open_gte_0 CHECK ((children_open >= 0)),
    CONSTRAINT runqueue_run_epoch_gte_0 CHECK ((lease_epoch >= 0)),
    CONSTRAINT runqueue_run_kind_not_empty CHECK ((NOT ((kind)::text = ''::text))),
    CONSTRAINT runqueue_run_max_attempts_gte_1 CHECK ((max_attempts >= 1)),
    CONSTRAINT runqueue_run_pending_in_line CHECK (((NOT ((status)::text = 'pending'::text)) OR ((place IS NOT NULL) AND (session_id IS NOT NULL)))),
    CONSTRAINT runqueue_run_priority_gte_0 CHECK ((priority >= 0)),
    CONSTRAINT runqueue_run_running_has_lease CHECK (((NOT ((status)::text = 'running'::text)) OR (lease_expires_at IS NOT NULL))),
    CONSTRAINT runqueue_run_status_valid CHECK ((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending', 'succeeded', 'failed', 'cancelled'))),
    CONSTRAINT runqueue_run_terminal_has_finished_at CHECK (((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending')) OR (finished_at IS NOT NULL)))
)
PARTITION BY LIST (status);

--
-- Name: runqueue_run_event; Type: TABLE
--

CREATE TABLE runqueue_run_event (
    id bigint NOT NULL,
    type character varying(64) NOT NULL,
    lease_epoch bigint NOT NULL,
    data jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    run_id uuid NOT NULL
)
PARTITION BY RANGE (created_at);

--
-- Name: runqueue_event_log; Type: VIEW
--

CREATE VIEW runqueue_event_log AS
 SELECT e.id,
    e.run_id,
    e.type,
    e.lease_epoch,
    e.data,
    e.created_at
   FROM runqueue_run_event e
UNION ALL
 SELECT r.claim_event_id AS id,
    r.id AS run_id,
    'run.claimed'::character varying(64) AS type,
    r.lease_epoch,
    runqueue_claimed_data((r.lease_owner)::text, r.lease_token, r.attempts, (r.priority)::integer, r.claim_wait_ms) AS data,
    r.claimed_at AS created_at
   FROM runqueue_run r
  WHERE (r.claim_event_id IS NOT NULL)
UNION ALL
 SELECT r.success_event_id AS id,
    r.id AS run_id,
    'run.succeeded'::character varying(64) AS type,
    r.lease_epoch,
    jsonb_build_object('attempt', r.attempts) AS data,
    r.finished_at AS created_at
   FROM runqueue_run r
  WHERE (r.success_event_id IS NOT NULL)
UNION ALL
 SELECT r.created_event_id AS id,
    r.id AS run_id,
    'run.created'::character varying(64) AS type,
    (0)::bigint AS lease_epoch,
    jsonb_build_object('priority', r.priority) AS data,
    r.created_at
   FROM runqueue_run r
  WHERE (r.created_event_id IS NOT NULL);

--
-- Name: runqueue_event_trigger; Type: TABLE
--

CREATE TABLE runqueue_event_trigger (
    id bigint NOT NULL,
    name character varying(255) NOT NULL,
    match jsonb NOT NULL,
    kind character varying(255) NOT NULL,
    priority smallint NOT NULL,
    tenant character varying(255) NOT NULL,
    enabled boolean NOT NULL,
    note character varying(255) NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    CONSTRAINT runqueue_event_trigger_priority_check CHECK ((priority >= 0))
);

--
-- Name: runqueue_event_trigger_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_event_trigger ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_event_trigger_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_idempotency_key; Type: TABLE
--

CREATE TABLE runqueue_idempotency_key (
    id bigint NOT NULL,
    tenant character varying(255) NOT NULL,
    principal character varying(255) NOT NULL,
    key character varying(255) NOT NULL,
    request_hash character varying(64) NOT NULL,
    outcome character varying(20) NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    run_id uuid NOT NULL,
    CONSTRAINT runqueue_idempotency_key_not_empty CHECK ((NOT ((key)::text = ''::text)))
);

--
-- Name: runqueue_idempotency_key_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_idempotency_key ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_idempotency_key_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_inbound_event; Type: TABLE
--

CREATE TABLE runqueue_inbound_event (
    id bigint NOT NULL,
    tenant character varying(255) NOT NULL,
    name character varying(255) NOT NULL,
    key character varying(255) NOT NULL,
    data jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    principal character varying(255) NOT NULL,
    started jsonb NOT NULL
);

--
-- Name: runqueue_inbound_event_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_inbound_event ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_inbound_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_paused_kind; Type: TABLE
--

CREATE TABLE runqueue_paused_kind (
    id bigint NOT NULL,
    kind character varying(255) NOT NULL,
    priority_class smallint,
    paused_by character varying(255) NOT NULL,
    reason character varying(500) NOT NULL,
    paused_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    CONSTRAINT runqueue_paused_kind_class_valid CHECK (((priority_class IS NULL) OR (priority_class = ANY (ARRAY[0, 10, 20])))),
    CONSTRAINT runqueue_paused_kind_not_empty CHECK ((NOT ((kind)::text = ''::text)))
);

--
-- Name: runqueue_paused_kind_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_paused_kind ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_paused_kind_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_queue_event; Type: TABLE
--

CREATE TABLE runqueue_queue_event (
    id bigint NOT NULL,
    type character varying(64) NOT NULL,
    subject character varying(255) NOT NULL,
    data jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL
);

--
-- Name: runqueue_queue_event_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_queue_event ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_queue_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_run_event_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_run_event ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_run_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_run_finished; Type: TABLE
--

CREATE TABLE runqueue_run_finished (
    id uuid NOT NULL,
    tenant character varying(255) NOT NULL,
    principal character varying(255) NOT NULL,
    session_id character varying(255),
    kind character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    status character varying(20) NOT NULL,
    priority smallint NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    scheduled_for timestamp with time zone,
    lease_epoch bigint NOT NULL,
    lease_owner character varying(255) NOT NULL,
    lease_expires_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    input jsonb,
    failure jsonb,
    result jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    traceparent character varying(55) DEFAULT ''::character varying NOT NULL,
    concurrency_key character varying(255) NOT NULL,
    lease_token uuid,
    budget_key character varying(255),
    budget_reserved bigint DEFAULT 0 NOT NULL,
    budget_tokens integer,
    budget_used bigint DEFAULT 0 NOT NULL,
    children_open integer DEFAULT 0 NOT NULL,
    parent_id uuid,
    timed_out boolean DEFAULT false NOT NULL,
    wait_name character varying(255) DEFAULT ''::character varying NOT NULL,
    wait_reason character varying(16) DEFAULT ''::character varying NOT NULL,
    wait_until timestamp with time zone,
    waiting_since timestamp with time zone,
    start_by timestamp with time zone,
    max_duration double precision,
    forked_from_id uuid,
    interrupted_id uuid,
    place bigint,
    handler_version integer,
    claim_event_id bigint,
    claimed_at timestamp with time zone,
    claim_wait_ms integer,
    success_event_id bigint,
    created_event_id bigint,
    turn jsonb,
    wait_match jsonb,
    paused_at timestamp with time zone,
    CONSTRAINT runqueue_run_attempts_in_range CHECK (((attempts >= 0) AND (attempts <= max_attempts))),
    CONSTRAINT runqueue_run_budget_declared CHECK (((budget_key IS NULL) OR ((budget_tokens >= 0) AND (budget_tokens IS NOT NULL)))),
    CONSTRAINT runqueue_run_children_open_gte_0 CHECK ((children_open >= 0)),
    CONSTRAINT runqueue_run_epoch_gte_0 CHECK ((lease_epoch >= 0)),
    CONSTRAINT runqueue_run_kind_not_empty CHECK ((NOT ((kind)::text = ''::text))),
    CONSTRAINT runqueue_run_max_attempts_gte_1 CHECK ((max_attempts >= 1)),
    CONSTRAINT runqueue_run_pending_in_line CHECK (((NOT ((status)::text = 'pending'::text)) OR ((place IS NOT NULL) AND (session_id IS NOT NULL)))),
    CONSTRAINT runqueue_run_priority_gte_0 CHECK ((priority >= 0)),
    CONSTRAINT runqueue_run_running_has_lease CHECK (((NOT ((status)::text = 'running'::text)) OR (lease_expires_at IS NOT NULL))),
    CONSTRAINT runqueue_run_status_valid CHECK ((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending', 'succeeded', 'failed', 'cancelled'))),
    CONSTRAINT runqueue_run_terminal_has_finished_at CHECK (((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending')) OR (finished_at IS NOT NULL)))
)
PARTITION BY RANGE (finished_at);

--
-- Name: runqueue_run_finished_default; Type: TABLE
--

CREATE TABLE runqueue_run_finished_default (
    id uuid NOT NULL,
    tenant character varying(255) NOT NULL,
    principal character varying(255) NOT NULL,
    session_id character varying(255),
    kind character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    status character varying(20) NOT NULL,
    priority smallint NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    scheduled_for timestamp with time zone,
    lease_epoch bigint NOT NULL,
    lease_owner character varying(255) NOT NULL,
    lease_expires_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    input jsonb,
    failure jsonb,
    result jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    traceparent character varying(55) DEFAULT ''::character varying NOT NULL,
    concurrency_key character varying(255) NOT NULL,
    lease_token uuid,
    budget_key character varying(255),
    budget_reserved bigint DEFAULT 0 NOT NULL,
    budget_tokens integer,
    budget_used bigint DEFAULT 0 NOT NULL,
    children_open integer DEFAULT 0 NOT NULL,
    parent_id uuid,
    timed_out boolean DEFAULT false NOT NULL,
    wait_name character varying(255) DEFAULT ''::character varying NOT NULL,
    wait_reason character varying(16) DEFAULT ''::character varying NOT NULL,
    wait_until timestamp with time zone,
    waiting_since timestamp with time zone,
    start_by timestamp with time zone,
    max_duration double precision,
    forked_from_id uuid,
    interrupted_id uuid,
    place bigint,
    handler_version integer,
    claim_event_id bigint,
    claimed_at timestamp with time zone,
    claim_wait_ms integer,
    success_event_id bigint,
    created_event_id bigint,
    turn jsonb,
    wait_match jsonb,
    paused_at timestamp with time zone,
    CONSTRAINT runqueue_run_attempts_in_range CHECK (((attempts >= 0) AND (attempts <= max_attempts))),
    CONSTRAINT runqueue_run_budget_declared CHECK (((budget_key IS NULL) OR ((budget_tokens >= 0) AND (budget_tokens IS NOT NULL)))),
    CONSTRAINT runqueue_run_children_open_gte_0 CHECK ((children_open >= 0)),
    CONSTRAINT runqueue_run_epoch_gte_0 CHECK ((lease_epoch >= 0)),
    CONSTRAINT runqueue_run_kind_not_empty CHECK ((NOT ((kind)::text = ''::text))),
    CONSTRAINT runqueue_run_max_attempts_gte_1 CHECK ((max_attempts >= 1)),
    CONSTRAINT runqueue_run_pending_in_line CHECK (((NOT ((status)::text = 'pending'::text)) OR ((place IS NOT NULL) AND (session_id IS NOT NULL)))),
    CONSTRAINT runqueue_run_priority_gte_0 CHECK ((priority >= 0)),
    CONSTRAINT runqueue_run_running_has_lease CHECK (((NOT ((status)::text = 'running'::text)) OR (lease_expires_at IS NOT NULL))),
    CONSTRAINT runqueue_run_status_valid CHECK ((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending', 'succeeded', 'failed', 'cancelled'))),
    CONSTRAINT runqueue_run_terminal_has_finished_at CHECK (((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending')) OR (finished_at IS NOT NULL)))
);

--
-- Name: runqueue_run_invalid; Type: TABLE
--

CREATE TABLE runqueue_run_invalid (
    id uuid NOT NULL,
    tenant character varying(255) NOT NULL,
    principal character varying(255) NOT NULL,
    session_id character varying(255),
    kind character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    status character varying(20) NOT NULL,
    priority smallint NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    scheduled_for timestamp with time zone,
    lease_epoch bigint NOT NULL,
    lease_owner character varying(255) NOT NULL,
    lease_expires_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    input jsonb,
    failure jsonb,
    result jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    traceparent character varying(55) DEFAULT ''::character varying NOT NULL,
    concurrency_key character varying(255) NOT NULL,
    lease_token uuid,
    budget_key character varying(255),
    budget_reserved bigint DEFAULT 0 NOT NULL,
    budget_tokens integer,
    budget_used bigint DEFAULT 0 NOT NULL,
    children_open integer DEFAULT 0 NOT NULL,
    parent_id uuid,
    timed_out boolean DEFAULT false NOT NULL,
    wait_name character varying(255) DEFAULT ''::character varying NOT NULL,
    wait_reason character varying(16) DEFAULT ''::character varying NOT NULL,
    wait_until timestamp with time zone,
    waiting_since timestamp with time zone,
    start_by timestamp with time zone,
    max_duration double precision,
    forked_from_id uuid,
    interrupted_id uuid,
    place bigint,
    handler_version integer,
    claim_event_id bigint,
    claimed_at timestamp with time zone,
    claim_wait_ms integer,
    success_event_id bigint,
    created_event_id bigint,
    turn jsonb,
    wait_match jsonb,
    paused_at timestamp with time zone,
    CONSTRAINT runqueue_run_attempts_in_range CHECK (((attempts >= 0) AND (attempts <= max_attempts))),
    CONSTRAINT runqueue_run_budget_declared CHECK (((budget_key IS NULL) OR ((budget_tokens >= 0) AND (budget_tokens IS NOT NULL)))),
    CONSTRAINT runqueue_run_children_open_gte_0 CHECK ((children_open >= 0)),
    CONSTRAINT runqueue_run_epoch_gte_0 CHECK ((lease_epoch >= 0)),
    CONSTRAINT runqueue_run_kind_not_empty CHECK ((NOT ((kind)::text = ''::text))),
    CONSTRAINT runqueue_run_max_attempts_gte_1 CHECK ((max_attempts >= 1)),
    CONSTRAINT runqueue_run_pending_in_line CHECK (((NOT ((status)::text = 'pending'::text)) OR ((place IS NOT NULL) AND (session_id IS NOT NULL)))),
    CONSTRAINT runqueue_run_priority_gte_0 CHECK ((priority >= 0)),
    CONSTRAINT runqueue_run_running_has_lease CHECK (((NOT ((status)::text = 'running'::text)) OR (lease_expires_at IS NOT NULL))),
    CONSTRAINT runqueue_run_status_valid CHECK ((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending', 'succeeded', 'failed', 'cancelled'))),
    CONSTRAINT runqueue_run_terminal_has_finished_at CHECK (((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending')) OR (finished_at IS NOT NULL)))
);

--
-- Name: runqueue_run_live; Type: TABLE
--

CREATE TABLE runqueue_run_live (
    id uuid NOT NULL,
    tenant character varying(255) NOT NULL,
    principal character varying(255) NOT NULL,
    session_id character varying(255),
    kind character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    status character varying(20) NOT NULL,
    priority smallint NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    scheduled_for timestamp with time zone,
    lease_epoch bigint NOT NULL,
    lease_owner character varying(255) NOT NULL,
    lease_expires_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    input jsonb,
    failure jsonb,
    result jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    traceparent character varying(55) DEFAULT ''::character varying NOT NULL,
    concurrency_key character varying(255) NOT NULL,
    lease_token uuid,
    budget_key character varying(255),
    budget_reserved bigint DEFAULT 0 NOT NULL,
    budget_tokens integer,
    budget_used bigint DEFAULT 0 NOT NULL,
    children_open integer DEFAULT 0 NOT NULL,
    parent_id uuid,
    timed_out boolean DEFAULT false NOT NULL,
    wait_name character varying(255) DEFAULT ''::character varying NOT NULL,
    wait_reason character varying(16) DEFAULT ''::character varying NOT NULL,
    wait_until timestamp with time zone,
    waiting_since timestamp with time zone,
    start_by timestamp with time zone,
    max_duration double precision,
    forked_from_id uuid,
    interrupted_id uuid,
    place bigint,
    handler_version integer,
    claim_event_id bigint,
    claimed_at timestamp with time zone,
    claim_wait_ms integer,
    success_event_id bigint,
    created_event_id bigint,
    turn jsonb,
    wait_match jsonb,
    paused_at timestamp with time zone,
    CONSTRAINT runqueue_run_attempts_in_range CHECK (((attempts >= 0) AND (attempts <= max_attempts))),
    CONSTRAINT runqueue_run_budget_declared CHECK (((budget_key IS NULL) OR ((budget_tokens >= 0) AND (budget_tokens IS NOT NULL)))),
    CONSTRAINT runqueue_run_children_open_gte_0 CHECK ((children_open >= 0)),
    CONSTRAINT runqueue_run_epoch_gte_0 CHECK ((lease_epoch >= 0)),
    CONSTRAINT runqueue_run_kind_not_empty CHECK ((NOT ((kind)::text = ''::text))),
    CONSTRAINT runqueue_run_max_attempts_gte_1 CHECK ((max_attempts >= 1)),
    CONSTRAINT runqueue_run_pending_in_line CHECK (((NOT ((status)::text = 'pending'::text)) OR ((place IS NOT NULL) AND (session_id IS NOT NULL)))),
    CONSTRAINT runqueue_run_priority_gte_0 CHECK ((priority >= 0)),
    CONSTRAINT runqueue_run_running_has_lease CHECK (((NOT ((status)::text = 'running'::text)) OR (lease_expires_at IS NOT NULL))),
    CONSTRAINT runqueue_run_status_valid CHECK ((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending', 'succeeded', 'failed', 'cancelled'))),
    CONSTRAINT runqueue_run_terminal_has_finished_at CHECK (((status IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending')) OR (finished_at IS NOT NULL)))
)
WITH (fillfactor='50');

--
-- Name: runqueue_schedule; Type: TABLE
--

CREATE TABLE runqueue_schedule (
    id bigint NOT NULL,
    name character varying(100) NOT NULL,
    source character varying(10) NOT NULL,
    cron character varying(255) NOT NULL,
    timezone character varying(64) NOT NULL,
    kind character varying(255) NOT NULL,
    payload jsonb NOT NULL,
    priority smallint NOT NULL,
    tenant character varying(255) NOT NULL,
    max_attempts integer,
    catch_up character varying(10) NOT NULL,
    catch_up_limit integer NOT NULL,
    handled_until timestamp with time zone NOT NULL,
    next_fire_at timestamp with time zone,
    paused_at timestamp with time zone,
    paused_by character varying(255) NOT NULL,
    pause_reason character varying(500) NOT NULL,
    retired_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    overlap character varying(16) DEFAULT 'skip'::character varying NOT NULL,
    created_by character varying(255) NOT NULL,
    on_busy character varying(16),
    run_at timestamp with time zone,
    runs_may_schedule boolean DEFAULT false NOT NULL,
    session_id character varying(255),
    token_id bigint,
    CONSTRAINT runqueue_schedule_catch_up_limit_range CHECK (((catch_up_limit >= 1) AND (catch_up_limit <= 1000))),
    CONSTRAINT runqueue_schedule_catch_up_valid CHECK ((catch_up IN ('latest', 'all', 'none'))),
    CONSTRAINT runqueue_schedule_cron_or_run_at CHECK ((((run_at IS NULL) AND (NOT ((cron)::text = ''::text))) OR ((run_at IS NOT NULL) AND ((cron)::text = ''::text)))),
    CONSTRAINT runqueue_schedule_name_not_empty CHECK ((NOT ((name)::text = ''::text))),
    CONSTRAINT runqueue_schedule_overlap_valid CHECK ((overlap IN ('skip', 'allow', 'cancel_previous'))),
    CONSTRAINT runqueue_schedule_priority_gte_0 CHECK ((priority >= 0))
);

--
-- Name: runqueue_schedule_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_schedule ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_schedule_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_schedule_tick; Type: TABLE
--

CREATE TABLE runqueue_schedule_tick (
    id bigint NOT NULL,
    tick_at timestamp with time zone NOT NULL,
    outcome character varying(10) NOT NULL,
    skipped_before timestamp with time zone,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    run_id uuid,
    schedule_id bigint NOT NULL
);

--
-- Name: runqueue_schedule_tick_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_schedule_tick ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_schedule_tick_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_signal; Type: TABLE
--

CREATE TABLE runqueue_signal (
    id bigint NOT NULL,
    name character varying(255) NOT NULL,
    data jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    run_id uuid NOT NULL
);

--
-- Name: runqueue_signal_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_signal ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_signal_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_stream_watch; Type: TABLE
--

CREATE UNLOGGED TABLE runqueue_stream_watch (
    run_id uuid NOT NULL,
    watcher character varying(255) NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

--
-- Name: runqueue_tool_invocation; Type: TABLE
--

CREATE TABLE runqueue_tool_invocation (
    id bigint NOT NULL,
    seq integer NOT NULL,
    tool character varying(255) NOT NULL,
    idempotency character varying(20) NOT NULL,
    status character varying(20) NOT NULL,
    arguments jsonb NOT NULL,
    result jsonb,
    error jsonb,
    lease_epoch bigint NOT NULL,
    resolution jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    finished_at timestamp with time zone,
    run_id uuid NOT NULL,
    lease_token uuid,
    approval jsonb,
    CONSTRAINT runqueue_tool_seq_gte_0 CHECK ((seq >= 0))
);

--
-- Name: runqueue_tool_invocation_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_tool_invocation ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_tool_invocation_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_tree_spend; Type: TABLE
--

CREATE TABLE runqueue_tree_spend (
    run_id uuid NOT NULL,
    spend_cap numeric(24,12),
    cost numeric(24,12) NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    calls bigint NOT NULL,
    unpriced_calls bigint NOT NULL,
    capped_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    CONSTRAINT runqueue_tree_spend_cap_gt_0 CHECK (((spend_cap IS NULL) OR (spend_cap > (0)::numeric)))
);

--
-- Name: runqueue_usage; Type: TABLE
--

CREATE TABLE runqueue_usage (
    id bigint NOT NULL,
    root_id uuid NOT NULL,
    tenant character varying(255) NOT NULL,
    session_id character varying(255),
    kind character varying(255) NOT NULL,
    lease_epoch bigint NOT NULL,
    call integer NOT NULL,
    attempt integer NOT NULL,
    model character varying(255) NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost numeric(24,12),
    fenced boolean NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    run_id uuid NOT NULL,
    CONSTRAINT runqueue_usage_cost_gte_0 CHECK (((cost IS NULL) OR (cost >= (0)::numeric))),
    CONSTRAINT runqueue_usage_counts_gte_0 CHECK (((call >= 0) AND (input_tokens >= 0) AND (output_tokens >= 0)))
);

--
-- Name: runqueue_usage_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_usage ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_usage_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_webhook_delivery; Type: TABLE
--

CREATE TABLE runqueue_webhook_delivery (
    id bigint NOT NULL,
    url character varying(2048) NOT NULL,
    event_type character varying(64) NOT NULL,
    message_id character varying(255) NOT NULL,
    body jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    last_status integer,
    last_error text DEFAULT ''::text NOT NULL,
    last_attempt_at timestamp with time zone,
    delivered_at timestamp with time zone,
    attempt_run_id uuid NOT NULL,
    run_id uuid NOT NULL,
    endpoint_id bigint NOT NULL
);

--
-- Name: runqueue_webhook_delivery_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_webhook_delivery ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_webhook_delivery_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_webhook_endpoint; Type: TABLE
--

CREATE TABLE runqueue_webhook_endpoint (
    id bigint NOT NULL,
    name character varying(255) NOT NULL,
    url character varying(2048) NOT NULL,
    tenant character varying(255) NOT NULL,
    subscribed boolean NOT NULL,
    kinds jsonb NOT NULL,
    event_types jsonb NOT NULL,
    principal character varying(255) NOT NULL,
    max_attempts smallint NOT NULL,
    active boolean NOT NULL,
    secret character varying(255) NOT NULL,
    previous_secret character varying(255) NOT NULL,
    previous_secret_until timestamp with time zone,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    token_id bigint,
    CONSTRAINT runqueue_webhook_endpoint_max_attempts_check CHECK ((max_attempts >= 0)),
    CONSTRAINT runqueue_webhook_max_attempts_valid CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
    CONSTRAINT runqueue_webhook_url_not_empty CHECK ((NOT ((url)::text = ''::text)))
);

--
-- Name: runqueue_webhook_endpoint_id_seq; Type: SEQUENCE
--

ALTER TABLE runqueue_webhook_endpoint ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME runqueue_webhook_endpoint_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: runqueue_webhook_target; Type: TABLE
--

CREATE TABLE runqueue_webhook_target (
    run_id uuid NOT NULL,
    url character varying(2048) NOT NULL,
    endpoint_id bigint NOT NULL
);

--
-- Name: runqueue_worker; Type: TABLE
--

CREATE TABLE runqueue_worker (
    id character varying(255) NOT NULL,
    hostname character varying(255) NOT NULL,
    pid integer NOT NULL,
    slots jsonb NOT NULL,
    started_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    stopped_at timestamp with time zone,
    cancelled_slots jsonb NOT NULL,
    kinds jsonb DEFAULT '{}'::jsonb NOT NULL
);

--
-- Name: runqueue_run_finished; Type: TABLE ATTACH
--

ALTER TABLE ONLY runqueue_run ATTACH PARTITION runqueue_run_finished FOR VALUES IN ('succeeded', 'failed', 'cancelled');

--
-- Name: runqueue_run_finished_default; Type: TABLE ATTACH
--

ALTER TABLE ONLY runqueue_run_finished ATTACH PARTITION runqueue_run_finished_default DEFAULT;

--
-- Name: runqueue_run_invalid; Type: TABLE ATTACH
--

ALTER TABLE ONLY runqueue_run ATTACH PARTITION runqueue_run_invalid DEFAULT;

--
-- Name: runqueue_run_live; Type: TABLE ATTACH
--

ALTER TABLE ONLY runqueue_run ATTACH PARTITION runqueue_run_live FOR VALUES IN ('queued', 'running', 'waiting_for_user', 'waiting', 'pending');

--
-- Name: runqueue_api_token runqueue_api_token_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_api_token
    ADD CONSTRAINT runqueue_api_token_pkey PRIMARY KEY (id);

--
-- Name: runqueue_api_token runqueue_api_token_prefix_key; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_api_token
    ADD CONSTRAINT runqueue_api_token_prefix_key UNIQUE (prefix);

--
-- Name: runqueue_api_token_quota runqueue_api_token_quota_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_api_token_quota
    ADD CONSTRAINT runqueue_api_token_quota_pkey PRIMARY KEY (token_id);

--
-- Name: runqueue_budget runqueue_budget_key_key; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_budget
    ADD CONSTRAINT runqueue_budget_key_key UNIQUE (key);

--
-- Name: runqueue_budget runqueue_budget_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_budget
    ADD CONSTRAINT runqueue_budget_pkey PRIMARY KEY (id);

--
-- Name: runqueue_checkpoint runqueue_checkpoint_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_checkpoint
    ADD CONSTRAINT runqueue_checkpoint_pkey PRIMARY KEY (id);

--
-- Name: runqueue_checkpoint runqueue_checkpoint_run_seq_unique; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_checkpoint
    ADD CONSTRAINT runqueue_checkpoint_run_seq_unique UNIQUE (run_id, seq);

--
-- Name: runqueue_concurrency_limit runqueue_concurrency_limit_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_concurrency_limit
    ADD CONSTRAINT runqueue_concurrency_limit_pkey PRIMARY KEY (id);

--
-- Name: runqueue_concurrency_limit runqueue_concurrency_limit_unique; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_concurrency_limit
    ADD CONSTRAINT runqueue_concurrency_limit_unique UNIQUE (key, priority_class);

--
-- Name: runqueue_event_delivery runqueue_event_delivery_once; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_event_delivery
    ADD CONSTRAINT runqueue_event_delivery_once UNIQUE (run_id, event_id);

--
-- Name: runqueue_event_delivery runqueue_event_delivery_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_event_delivery
    ADD CONSTRAINT runqueue_event_delivery_pkey PRIMARY KEY (id);

--
-- Name: runqueue_event_trigger runqueue_event_trigger_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_event_trigger
    ADD CONSTRAINT runqueue_event_trigger_pkey PRIMARY KEY (id);

--
-- Name: runqueue_idempotency_key runqueue_idempotency_key_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_idempotency_key
    ADD CONSTRAINT runqueue_idempotency_key_pkey PRIMARY KEY (id);

--
-- Name: runqueue_idempotency_key runqueue_idempotency_key_unique; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_idempotency_key
    ADD CONSTRAINT runqueue_idempotency_key_unique UNIQUE (tenant, principal, key);

--
-- Name: runqueue_inbound_event runqueue_inbound_event_key; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_inbound_event
    ADD CONSTRAINT runqueue_inbound_event_key UNIQUE (tenant, name, key);

--
-- Name: runqueue_inbound_event runqueue_inbound_event_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_inbound_event
    ADD CONSTRAINT runqueue_inbound_event_pkey PRIMARY KEY (id);

--
-- Name: runqueue_paused_kind runqueue_paused_kind_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_paused_kind
    ADD CONSTRAINT runqueue_paused_kind_pkey PRIMARY KEY (id);

--
-- Name: runqueue_queue_event runqueue_queue_event_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_queue_event
    ADD CONSTRAINT runqueue_queue_event_pkey PRIMARY KEY (id);

--
-- Name: runqueue_run_event runqueue_run_event_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_run_event
    ADD CONSTRAINT runqueue_run_event_pkey PRIMARY KEY (run_id, id, created_at);

--
-- Name: runqueue_run_live runqueue_run_live_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_run_live
    ADD CONSTRAINT runqueue_run_live_pkey PRIMARY KEY (id);

--
-- Name: runqueue_schedule runqueue_schedule_name_key; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_schedule
    ADD CONSTRAINT runqueue_schedule_name_key UNIQUE (name);

--
-- Name: runqueue_schedule runqueue_schedule_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_schedule
    ADD CONSTRAINT runqueue_schedule_pkey PRIMARY KEY (id);

--
-- Name: runqueue_schedule_tick runqueue_schedule_tick_once; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_schedule_tick
    ADD CONSTRAINT runqueue_schedule_tick_once UNIQUE (schedule_id, tick_at);

--
-- Name: runqueue_schedule_tick runqueue_schedule_tick_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_schedule_tick
    ADD CONSTRAINT runqueue_schedule_tick_pkey PRIMARY KEY (id);

--
-- Name: runqueue_signal runqueue_signal_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_signal
    ADD CONSTRAINT runqueue_signal_pkey PRIMARY KEY (id);

--
-- Name: runqueue_stream_watch runqueue_stream_watch_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_stream_watch
    ADD CONSTRAINT runqueue_stream_watch_pkey PRIMARY KEY (run_id, watcher);

--
-- Name: runqueue_tool_invocation runqueue_tool_invocation_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_tool_invocation
    ADD CONSTRAINT runqueue_tool_invocation_pkey PRIMARY KEY (id);

--
-- Name: runqueue_tool_invocation runqueue_tool_run_seq_unique; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_tool_invocation
    ADD CONSTRAINT runqueue_tool_run_seq_unique UNIQUE (run_id, seq);

--
-- Name: runqueue_tree_spend runqueue_tree_spend_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_tree_spend
    ADD CONSTRAINT runqueue_tree_spend_pkey PRIMARY KEY (run_id);

--
-- Name: runqueue_usage runqueue_usage_once; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_usage
    ADD CONSTRAINT runqueue_usage_once UNIQUE (run_id, lease_epoch, call);

--
-- Name: runqueue_usage runqueue_usage_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_usage
    ADD CONSTRAINT runqueue_usage_pkey PRIMARY KEY (id);

--
-- Name: runqueue_webhook_delivery runqueue_webhook_delivery_once; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_delivery
    ADD CONSTRAINT runqueue_webhook_delivery_once UNIQUE (endpoint_id, url, message_id);

--
-- Name: runqueue_webhook_delivery runqueue_webhook_delivery_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_delivery
    ADD CONSTRAINT runqueue_webhook_delivery_pkey PRIMARY KEY (id);

--
-- Name: runqueue_webhook_endpoint runqueue_webhook_endpoint_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_endpoint
    ADD CONSTRAINT runqueue_webhook_endpoint_pkey PRIMARY KEY (id);

--
-- Name: runqueue_webhook_target runqueue_webhook_target_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_target
    ADD CONSTRAINT runqueue_webhook_target_pkey PRIMARY KEY (run_id);

--
-- Name: runqueue_worker runqueue_worker_pkey; Type: CONSTRAINT
--

ALTER TABLE ONLY runqueue_worker
    ADD CONSTRAINT runqueue_worker_pkey PRIMARY KEY (id);

--
-- Name: runqueue_api_token_prefix_360d06e2_like; Type: INDEX
--

CREATE INDEX runqueue_api_token_prefix_360d06e2_like ON runqueue_api_token USING btree (prefix varchar_pattern_ops);

--
-- Name: runqueue_api_token_user_id_b0447a82; Type: INDEX
--

CREATE INDEX runqueue_api_token_user_id_b0447a82 ON runqueue_api_token USING btree (user_id);

--
-- Name: runqueue_budget_key_b3b0a55f_like; Type: INDEX
--

CREATE INDEX runqueue_budget_key_b3b0a55f_like ON runqueue_budget USING btree (key varchar_pattern_ops);

--
-- Name: runqueue_checkpoint_run_id_99f0c434; Type: INDEX
--

CREATE INDEX runqueue_checkpoint_run_id_99f0c434 ON runqueue_checkpoint USING btree (run_id);

--
-- Name: runqueue_event_created_idx; Type: INDEX
--

CREATE INDEX runqueue_event_created_idx ON ONLY runqueue_run_event USING brin (created_at);

--
-- Name: runqueue_event_delivery_event_id_1780c3fe; Type: INDEX
--

CREATE INDEX runqueue_event_delivery_event_id_1780c3fe ON runqueue_event_delivery USING btree (event_id);

--
-- Name: runqueue_idemkey_expires_idx; Type: INDEX
--

CREATE INDEX runqueue_idemkey_expires_idx ON runqueue_idempotency_key USING btree (expires_at);

--
-- Name: runqueue_idempotency_key_run_id_5c02106d; Type: INDEX
--

CREATE INDEX runqueue_idempotency_key_run_id_5c02106d ON runqueue_idempotency_key USING btree (run_id);

--
-- Name: runqueue_inbound_age_idx; Type: INDEX
--

CREATE INDEX runqueue_inbound_age_idx ON runqueue_inbound_event USING btree (received_at);

--
-- Name: runqueue_inbound_name_idx; Type: INDEX
--

CREATE INDEX runqueue_inbound_name_idx ON runqueue_inbound_event USING btree (tenant, name, received_at);

--
-- Name: runqueue_paused_kind_all_classes; Type: INDEX
--

CREATE UNIQUE INDEX runqueue_paused_kind_all_classes ON runqueue_paused_kind USING btree (kind) WHERE (priority_class IS NULL);

--
-- Name: runqueue_paused_kind_one_class; Type: INDEX
--

CREATE UNIQUE INDEX runqueue_paused_kind_one_class ON runqueue_paused_kind USING btree (kind, priority_class) WHERE (priority_class IS NOT NULL);

--
-- Name: runqueue_queue_event_subj_idx; Type: INDEX
--

CREATE INDEX runqueue_queue_event_subj_idx ON runqueue_queue_event USING btree (subject, id);

--
-- Name: runqueue_run_budget_idx; Type: INDEX
--

CREATE INDEX runqueue_run_budget_idx ON runqueue_run_live USING btree (budget_key, tenant) WHERE ((budget_key IS NOT NULL) AND ((status)::text = 'queued'::text));

--
-- Name: runqueue_run_claim_idx; Type: INDEX
--

CREATE INDEX runqueue_run_claim_idx ON runqueue_run_live USING btree (priority, created_at) WHERE ((status)::text = 'queued'::text);

--
-- Name: runqueue_run_created_idx; Type: INDEX
--

CREATE INDEX runqueue_run_created_idx ON ONLY runqueue_run USING btree (created_at, id);

--
-- Name: runqueue_run_deadline_idx; Type: INDEX
--

CREATE INDEX runqueue_run_deadline_idx ON runqueue_run_live USING btree (wait_until) WHERE ((status IN ('waiting', 'waiting_for_user')) AND (wait_until IS NOT NULL));

--
-- Name: runqueue_run_event_wait_idx; Type: INDEX
--

CREATE INDEX runqueue_run_event_wait_idx ON runqueue_run_live USING btree (tenant, wait_name) WHERE (((status)::text = 'waiting'::text) AND ((wait_reason)::text = 'event'::text));

--
-- Name: runqueue_run_failed_idx; Type: INDEX
--

CREATE INDEX runqueue_run_failed_idx ON ONLY runqueue_run USING btree (finished_at) WHERE ((status)::text = 'failed'::text);

--
-- Name: runqueue_run_finished_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_created_at_id_idx ON ONLY runqueue_run_finished USING btree (created_at, id);

--
-- Name: runqueue_run_finished_default_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_created_at_id_idx ON runqueue_run_finished_default USING btree (created_at, id);

--
-- Name: runqueue_run_finished_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_idx ON ONLY runqueue_run_finished USING brin (finished_at);

--
-- Name: runqueue_run_finished_default_finished_at_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_finished_at_idx ON runqueue_run_finished_default USING brin (finished_at);

--
-- Name: runqueue_run_finished_finished_at_idx1; Type: INDEX
--

CREATE INDEX runqueue_run_finished_finished_at_idx1 ON ONLY runqueue_run_finished USING btree (finished_at) WHERE ((status)::text = 'failed'::text);

--
-- Name: runqueue_run_finished_default_finished_at_idx1; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_finished_at_idx1 ON runqueue_run_finished_default USING btree (finished_at) WHERE ((status)::text = 'failed'::text);

--
-- Name: runqueue_run_forked_from_idx; Type: INDEX
--

CREATE INDEX runqueue_run_forked_from_idx ON ONLY runqueue_run USING btree (forked_from_id) WHERE (forked_from_id IS NOT NULL);

--
-- Name: runqueue_run_finished_forked_from_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_forked_from_id_idx ON ONLY runqueue_run_finished USING btree (forked_from_id) WHERE (forked_from_id IS NOT NULL);

--
-- Name: runqueue_run_finished_default_forked_from_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_forked_from_id_idx ON runqueue_run_finished_default USING btree (forked_from_id) WHERE (forked_from_id IS NOT NULL);

--
-- Name: runqueue_run_finished_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_id_idx ON ONLY runqueue_run_finished USING btree (id);

--
-- Name: runqueue_run_finished_default_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_id_idx ON runqueue_run_finished_default USING btree (id);

--
-- Name: runqueue_run_kind_idx; Type: INDEX
--

CREATE INDEX runqueue_run_kind_idx ON ONLY runqueue_run_finished USING btree (kind, created_at);

--
-- Name: runqueue_run_finished_default_kind_created_at_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_kind_created_at_idx ON runqueue_run_finished_default USING btree (kind, created_at);

--
-- Name: runqueue_run_parent_idx; Type: INDEX
--

CREATE INDEX runqueue_run_parent_idx ON ONLY runqueue_run USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: runqueue_run_finished_parent_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_parent_id_idx ON ONLY runqueue_run_finished USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: runqueue_run_finished_default_parent_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_parent_id_idx ON runqueue_run_finished_default USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: runqueue_run_principal_idx; Type: INDEX
--

CREATE INDEX runqueue_run_principal_idx ON ONLY runqueue_run USING btree (principal) WHERE ((principal)::text <> ''::text);

--
-- Name: runqueue_run_finished_principal_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_principal_idx ON ONLY runqueue_run_finished USING btree (principal) WHERE ((principal)::text <> ''::text);

--
-- Name: runqueue_run_finished_default_principal_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_principal_idx ON runqueue_run_finished_default USING btree (principal) WHERE ((principal)::text <> ''::text);

--
-- Name: runqueue_run_priority_idx; Type: INDEX
--

CREATE INDEX runqueue_run_priority_idx ON ONLY runqueue_run_finished USING btree (priority, created_at);

--
-- Name: runqueue_run_finished_default_priority_created_at_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_priority_created_at_idx ON runqueue_run_finished_default USING btree (priority, created_at);

--
-- Name: runqueue_run_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_session_id_idx ON ONLY runqueue_run USING btree (session_id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_finished_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_session_id_idx ON ONLY runqueue_run_finished USING btree (session_id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_finished_default_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_session_id_idx ON runqueue_run_finished_default USING btree (session_id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_session_turns_idx; Type: INDEX
--

CREATE INDEX runqueue_run_session_turns_idx ON ONLY runqueue_run USING btree (tenant, session_id, created_at, id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_finished_tenant_session_id_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_tenant_session_id_created_at_id_idx ON ONLY runqueue_run_finished USING btree (tenant, session_id, created_at, id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_finished_default_tenant_session_id_created_at__idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_tenant_session_id_created_at__idx ON runqueue_run_finished_default USING btree (tenant, session_id, created_at, id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_session_idx; Type: INDEX
--

CREATE INDEX runqueue_run_session_idx ON ONLY runqueue_run USING btree (tenant, session_id);

--
-- Name: runqueue_run_finished_tenant_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_tenant_session_id_idx ON ONLY runqueue_run_finished USING btree (tenant, session_id);

--
-- Name: runqueue_run_finished_default_tenant_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_finished_default_tenant_session_id_idx ON runqueue_run_finished_default USING btree (tenant, session_id);

--
-- Name: runqueue_run_invalid_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_created_at_id_idx ON runqueue_run_invalid USING btree (created_at, id);

--
-- Name: runqueue_run_invalid_finished_at_idx1; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_finished_at_idx1 ON runqueue_run_invalid USING btree (finished_at) WHERE ((status)::text = 'failed'::text);

--
-- Name: runqueue_run_invalid_forked_from_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_forked_from_id_idx ON runqueue_run_invalid USING btree (forked_from_id) WHERE (forked_from_id IS NOT NULL);

--
-- Name: runqueue_run_invalid_parent_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_parent_id_idx ON runqueue_run_invalid USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: runqueue_run_invalid_principal_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_principal_idx ON runqueue_run_invalid USING btree (principal) WHERE ((principal)::text <> ''::text);

--
-- Name: runqueue_run_invalid_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_session_id_idx ON runqueue_run_invalid USING btree (session_id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_invalid_tenant_session_id_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_tenant_session_id_created_at_id_idx ON runqueue_run_invalid USING btree (tenant, session_id, created_at, id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_invalid_tenant_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_invalid_tenant_session_id_idx ON runqueue_run_invalid USING btree (tenant, session_id);

--
-- Name: runqueue_run_key_idx; Type: INDEX
--

CREATE INDEX runqueue_run_key_idx ON runqueue_run_live USING btree (concurrency_key, status, priority, created_at) WHERE ((concurrency_key IS NOT NULL) AND (status IN ('queued', 'running')));

--
-- Name: runqueue_run_leased_idx; Type: INDEX
--

CREATE INDEX runqueue_run_leased_idx ON runqueue_run_live USING btree (status, id) WHERE (status IN ('running', 'waiting_for_user'));

--
-- Name: runqueue_run_live_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_created_at_id_idx ON runqueue_run_live USING btree (created_at, id);

--
-- Name: runqueue_run_live_finished_at_idx1; Type: INDEX
--

CREATE INDEX runqueue_run_live_finished_at_idx1 ON runqueue_run_live USING btree (finished_at) WHERE ((status)::text = 'failed'::text);

--
-- Name: runqueue_run_live_finished_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_finished_idx ON runqueue_run_live USING btree (finished_at) WHERE (finished_at IS NOT NULL);

--
-- Name: runqueue_run_live_forked_from_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_forked_from_id_idx ON runqueue_run_live USING btree (forked_from_id) WHERE (forked_from_id IS NOT NULL);

--
-- Name: runqueue_run_live_parent_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_parent_id_idx ON runqueue_run_live USING btree (parent_id) WHERE (parent_id IS NOT NULL);

--
-- Name: runqueue_run_live_principal_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_principal_idx ON runqueue_run_live USING btree (principal) WHERE ((principal)::text <> ''::text);

--
-- Name: runqueue_run_live_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_session_id_idx ON runqueue_run_live USING btree (session_id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_live_tenant_session_id_created_at_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_tenant_session_id_created_at_id_idx ON runqueue_run_live USING btree (tenant, session_id, created_at, id) WHERE (session_id IS NOT NULL);

--
-- Name: runqueue_run_live_tenant_session_id_idx; Type: INDEX
--

CREATE INDEX runqueue_run_live_tenant_session_id_idx ON runqueue_run_live USING btree (tenant, session_id);

--
-- Name: runqueue_run_one_active_per_session; Type: INDEX
--

CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run_live USING btree (tenant, session_id) WHERE ((session_id IS NOT NULL) AND (status IN ('queued', 'running', 'waiting_for_user', 'waiting')));

--
-- Name: runqueue_run_pending_place; Type: INDEX
--

CREATE UNIQUE INDEX runqueue_run_pending_place ON runqueue_run_live USING btree (tenant, session_id, place) WHERE ((status)::text = 'pending'::text);

--
-- Name: runqueue_run_start_by_idx; Type: INDEX
--

CREATE INDEX runqueue_run_start_by_idx ON runqueue_run_live USING btree (start_by) WHERE ((status IN ('queued', 'pending')) AND (start_by IS NOT NULL));

--
-- Name: runqueue_run_waiting_idx; Type: INDEX
--

CREATE INDEX runqueue_run_waiting_idx ON runqueue_run_live USING btree (wait_reason, id) WHERE (status IN ('waiting', 'waiting_for_user'));

--
-- Name: runqueue_schedule_due_idx; Type: INDEX
--

CREATE INDEX runqueue_schedule_due_idx ON runqueue_schedule USING btree (next_fire_at) WHERE ((paused_at IS NULL) AND (retired_at IS NULL));

--
-- Name: runqueue_schedule_name_1983c5a9_like; Type: INDEX
--

CREATE INDEX runqueue_schedule_name_1983c5a9_like ON runqueue_schedule USING btree (name varchar_pattern_ops);

--
-- Name: runqueue_schedule_tick_run_id_a8552863; Type: INDEX
--

CREATE INDEX runqueue_schedule_tick_run_id_a8552863 ON runqueue_schedule_tick USING btree (run_id);

--
-- Name: runqueue_schedule_tick_schedule_id_cb14d1b8; Type: INDEX
--

CREATE INDEX runqueue_schedule_tick_schedule_id_cb14d1b8 ON runqueue_schedule_tick USING btree (schedule_id);

--
-- Name: runqueue_schedule_token_id_fe73b61e; Type: INDEX
--

CREATE INDEX runqueue_schedule_token_id_fe73b61e ON runqueue_schedule USING btree (token_id);

--
-- Name: runqueue_signal_run_idx; Type: INDEX
--

CREATE INDEX runqueue_signal_run_idx ON runqueue_signal USING btree (run_id, name, id);

--
-- Name: runqueue_tool_awaiting_idx; Type: INDEX
--

CREATE INDEX runqueue_tool_awaiting_idx ON runqueue_tool_invocation USING btree (created_at) WHERE ((status)::text = 'awaiting_approval'::text);

--
-- Name: runqueue_tool_invocation_run_id_27d74654; Type: INDEX
--

CREATE INDEX runqueue_tool_invocation_run_id_27d74654 ON runqueue_tool_invocation USING btree (run_id);

--
-- Name: runqueue_tool_unresolved_idx; Type: INDEX
--

CREATE INDEX runqueue_tool_unresolved_idx ON runqueue_tool_invocation USING btree (run_id) WHERE ((resolution IS NULL) AND ((status)::text = 'uncertain'::text));

--
-- Name: runqueue_trigger_name_idx; Type: INDEX
--

CREATE INDEX runqueue_trigger_name_idx ON runqueue_event_trigger USING btree (name);

--
-- Name: runqueue_usage_root_idx; Type: INDEX
--

CREATE INDEX runqueue_usage_root_idx ON runqueue_usage USING btree (root_id);

--
-- Name: runqueue_usage_session_idx; Type: INDEX
--

CREATE INDEX runqueue_usage_session_idx ON runqueue_usage USING btree (tenant, session_id);

--
-- Name: runqueue_usage_tenant_idx; Type: INDEX
--

CREATE INDEX runqueue_usage_tenant_idx ON runqueue_usage USING btree (tenant, created_at);

--
-- Name: runqueue_webhook_attempt_idx; Type: INDEX
--

CREATE INDEX runqueue_webhook_attempt_idx ON runqueue_webhook_delivery USING btree (attempt_run_id);

--
-- Name: runqueue_webhook_delivery_attempt_run_id_5dbc225a; Type: INDEX
--

CREATE INDEX runqueue_webhook_delivery_attempt_run_id_5dbc225a ON runqueue_webhook_delivery USING btree (attempt_run_id);

--
-- Name: runqueue_webhook_delivery_endpoint_id_9259c5a2; Type: INDEX
--

CREATE INDEX runqueue_webhook_delivery_endpoint_id_9259c5a2 ON runqueue_webhook_delivery USING btree (endpoint_id);

--
-- Name: runqueue_webhook_delivery_run_id_31fa7bd7; Type: INDEX
--

CREATE INDEX runqueue_webhook_delivery_run_id_31fa7bd7 ON runqueue_webhook_delivery USING btree (run_id);

--
-- Name: runqueue_webhook_endpoint_token_id_75f91c0f; Type: INDEX
--

CREATE INDEX runqueue_webhook_endpoint_token_id_75f91c0f ON runqueue_webhook_endpoint USING btree (token_id);

--
-- Name: runqueue_webhook_run_idx; Type: INDEX
--

CREATE INDEX runqueue_webhook_run_idx ON runqueue_webhook_delivery USING btree (run_id);

--
-- Name: runqueue_webhook_target_endpoint_id_5ce52b9e; Type: INDEX
--

CREATE INDEX runqueue_webhook_target_endpoint_id_5ce52b9e ON runqueue_webhook_target USING btree (endpoint_id);

--
-- Name: runqueue_worker_id_15ee235e_like; Type: INDEX
--

CREATE INDEX runqueue_worker_id_15ee235e_like ON runqueue_worker USING btree (id varchar_pattern_ops);

--
-- Name: runqueue_run_finished_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_created_idx ATTACH PARTITION runqueue_run_finished_created_at_id_idx;

--
-- Name: runqueue_run_finished_default_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_created_at_id_idx ATTACH PARTITION runqueue_run_finished_default_created_at_id_idx;

--
-- Name: runqueue_run_finished_default_finished_at_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_idx ATTACH PARTITION runqueue_run_finished_default_finished_at_idx;

--
-- Name: runqueue_run_finished_default_finished_at_idx1; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_finished_at_idx1 ATTACH PARTITION runqueue_run_finished_default_finished_at_idx1;

--
-- Name: runqueue_run_finished_default_forked_from_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_forked_from_id_idx ATTACH PARTITION runqueue_run_finished_default_forked_from_id_idx;

--
-- Name: runqueue_run_finished_default_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_id_idx ATTACH PARTITION runqueue_run_finished_default_id_idx;

--
-- Name: runqueue_run_finished_default_kind_created_at_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_kind_idx ATTACH PARTITION runqueue_run_finished_default_kind_created_at_idx;

--
-- Name: runqueue_run_finished_default_parent_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_parent_id_idx ATTACH PARTITION runqueue_run_finished_default_parent_id_idx;

--
-- Name: runqueue_run_finished_default_principal_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_principal_idx ATTACH PARTITION runqueue_run_finished_default_principal_idx;

--
-- Name: runqueue_run_finished_default_priority_created_at_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_priority_idx ATTACH PARTITION runqueue_run_finished_default_priority_created_at_idx;

--
-- Name: runqueue_run_finished_default_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_session_id_idx ATTACH PARTITION runqueue_run_finished_default_session_id_idx;

--
-- Name: runqueue_run_finished_default_tenant_session_id_created_at__idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_tenant_session_id_created_at_id_idx ATTACH PARTITION runqueue_run_finished_default_tenant_session_id_created_at__idx;

--
-- Name: runqueue_run_finished_default_tenant_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_finished_tenant_session_id_idx ATTACH PARTITION runqueue_run_finished_default_tenant_session_id_idx;

--
-- Name: runqueue_run_finished_finished_at_idx1; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_failed_idx ATTACH PARTITION runqueue_run_finished_finished_at_idx1;

--
-- Name: runqueue_run_finished_forked_from_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_forked_from_idx ATTACH PARTITION runqueue_run_finished_forked_from_id_idx;

--
-- Name: runqueue_run_finished_parent_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_parent_idx ATTACH PARTITION runqueue_run_finished_parent_id_idx;

--
-- Name: runqueue_run_finished_principal_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_principal_idx ATTACH PARTITION runqueue_run_finished_principal_idx;

--
-- Name: runqueue_run_finished_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_id_idx ATTACH PARTITION runqueue_run_finished_session_id_idx;

--
-- Name: runqueue_run_finished_tenant_session_id_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_turns_idx ATTACH PARTITION runqueue_run_finished_tenant_session_id_created_at_id_idx;

--
-- Name: runqueue_run_finished_tenant_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_idx ATTACH PARTITION runqueue_run_finished_tenant_session_id_idx;

--
-- Name: runqueue_run_invalid_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_created_idx ATTACH PARTITION runqueue_run_invalid_created_at_id_idx;

--
-- Name: runqueue_run_invalid_finished_at_idx1; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_failed_idx ATTACH PARTITION runqueue_run_invalid_finished_at_idx1;

--
-- Name: runqueue_run_invalid_forked_from_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_forked_from_idx ATTACH PARTITION runqueue_run_invalid_forked_from_id_idx;

--
-- Name: runqueue_run_invalid_parent_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_parent_idx ATTACH PARTITION runqueue_run_invalid_parent_id_idx;

--
-- Name: runqueue_run_invalid_principal_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_principal_idx ATTACH PARTITION runqueue_run_invalid_principal_idx;

--
-- Name: runqueue_run_invalid_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_id_idx ATTACH PARTITION runqueue_run_invalid_session_id_idx;

--
-- Name: runqueue_run_invalid_tenant_session_id_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_turns_idx ATTACH PARTITION runqueue_run_invalid_tenant_session_id_created_at_id_idx;

--
-- Name: runqueue_run_invalid_tenant_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_idx ATTACH PARTITION runqueue_run_invalid_tenant_session_id_idx;

--
-- Name: runqueue_run_live_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_created_idx ATTACH PARTITION runqueue_run_live_created_at_id_idx;

--
-- Name: runqueue_run_live_finished_at_idx1; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_failed_idx ATTACH PARTITION runqueue_run_live_finished_at_idx1;

--
-- Name: runqueue_run_live_forked_from_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_forked_from_idx ATTACH PARTITION runqueue_run_live_forked_from_id_idx;

--
-- Name: runqueue_run_live_parent_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_parent_idx ATTACH PARTITION runqueue_run_live_parent_id_idx;

--
-- Name: runqueue_run_live_principal_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_principal_idx ATTACH PARTITION runqueue_run_live_principal_idx;

--
-- Name: runqueue_run_live_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_id_idx ATTACH PARTITION runqueue_run_live_session_id_idx;

--
-- Name: runqueue_run_live_tenant_session_id_created_at_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_turns_idx ATTACH PARTITION runqueue_run_live_tenant_session_id_created_at_id_idx;

--
-- Name: runqueue_run_live_tenant_session_id_idx; Type: INDEX ATTACH
--

ALTER INDEX runqueue_run_session_idx ATTACH PARTITION runqueue_run_live_tenant_session_id_idx;

--
-- Name: runqueue_run_live_class_stats; Type: STATISTICS
--

CREATE STATISTICS runqueue_run_live_class_stats ON runqueue_priority_class(priority::integer) FROM runqueue_run_live;

--
-- Name: runqueue_run_event runqueue_event_notify; Type: TRIGGER
--

CREATE TRIGGER runqueue_event_notify AFTER INSERT ON runqueue_run_event FOR EACH ROW EXECUTE FUNCTION runqueue_event_notify();

--
-- Name: runqueue_run_event runqueue_event_webhook; Type: TRIGGER
--

CREATE TRIGGER runqueue_event_webhook AFTER INSERT ON runqueue_run_event FOR EACH ROW WHEN (((new.type)::text = 'tool.uncertain'::text)) EXECUTE FUNCTION runqueue_webhook_event();

--
-- Name: runqueue_run runqueue_run_log_kept; Type: TRIGGER
--

CREATE TRIGGER runqueue_run_log_kept BEFORE UPDATE ON runqueue_run FOR EACH ROW WHEN ((((old.claim_event_id IS NOT NULL) OR (old.success_event_id IS NOT NULL)) AND ((old.status)::text IS DISTINCT FROM (new.status)::text) AND (NOT (((old.status)::text = 'running'::text) AND ((new.status)::text = 'succeeded'::text))))) EXECUTE FUNCTION runqueue_run_log_kept();

--
-- Name: runqueue_webhook_endpoint runqueue_webhook_endpoint_sync; Type: TRIGGER
--

CREATE TRIGGER runqueue_webhook_endpoint_sync AFTER INSERT OR DELETE OR UPDATE ON runqueue_webhook_endpoint FOR EACH STATEMENT EXECUTE FUNCTION runqueue_webhook_sync();

--
-- Name: runqueue_api_token_quota runqueue_api_token_q_token_id_9e2ac9c4_fk_runqueue_; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_api_token_quota
    ADD CONSTRAINT runqueue_api_token_q_token_id_9e2ac9c4_fk_runqueue_ FOREIGN KEY (token_id) REFERENCES runqueue_api_token(id) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_api_token {{user_fk}}; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_api_token
    ADD CONSTRAINT {{user_fk}} FOREIGN KEY (user_id) REFERENCES {{user_table}}({{user_pk}}) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_event_delivery runqueue_event_deliv_event_id_1780c3fe_fk_runqueue_; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_event_delivery
    ADD CONSTRAINT runqueue_event_deliv_event_id_1780c3fe_fk_runqueue_ FOREIGN KEY (event_id) REFERENCES runqueue_inbound_event(id) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_schedule_tick runqueue_schedule_ti_schedule_id_cb14d1b8_fk_runqueue_; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_schedule_tick
    ADD CONSTRAINT runqueue_schedule_ti_schedule_id_cb14d1b8_fk_runqueue_ FOREIGN KEY (schedule_id) REFERENCES runqueue_schedule(id) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_schedule runqueue_schedule_token_id_fe73b61e_fk_runqueue_api_token_id; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_schedule
    ADD CONSTRAINT runqueue_schedule_token_id_fe73b61e_fk_runqueue_api_token_id FOREIGN KEY (token_id) REFERENCES runqueue_api_token(id) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_webhook_delivery runqueue_webhook_del_endpoint_id_9259c5a2_fk_runqueue_; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_delivery
    ADD CONSTRAINT runqueue_webhook_del_endpoint_id_9259c5a2_fk_runqueue_ FOREIGN KEY (endpoint_id) REFERENCES runqueue_webhook_endpoint(id) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_webhook_endpoint runqueue_webhook_end_token_id_75f91c0f_fk_runqueue_; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_endpoint
    ADD CONSTRAINT runqueue_webhook_end_token_id_75f91c0f_fk_runqueue_ FOREIGN KEY (token_id) REFERENCES runqueue_api_token(id) DEFERRABLE INITIALLY DEFERRED;

--
-- Name: runqueue_webhook_target runqueue_webhook_tar_endpoint_id_5ce52b9e_fk_runqueue_; Type: FK CONSTRAINT
--

ALTER TABLE ONLY runqueue_webhook_target
    ADD CONSTRAINT runqueue_webhook_tar_endpoint_id_5ce52b9e_fk_runqueue_ FOREIGN KEY (endpoint_id) REFERENCES runqueue_webhook_endpoint(id) DEFERRABLE INITIALLY DEFERRED;

--
-- The events' default partition, made as 0009_history made it: PARTITION OF
-- gives its primary key the flags of an inherited one (made apart and
-- attached, as pg_dump writes it, the key would not be).
--

CREATE TABLE runqueue_run_event_default PARTITION OF runqueue_run_event DEFAULT;

--
-- Day partitions: runqueue_run_finished and runqueue_run_event, a partition
-- per day (UTC) from today to three days ahead, made as 0009_history made them
-- on a database with no runs (its loop, from current_date). The worker's
-- maintenance makes the days after (runqueue.partitions.ensure).
--

DO $$
DECLARE
    parent text;
    day date;
BEGIN
    FOREACH parent IN ARRAY ARRAY['runqueue_run_finished', 'runqueue_run_event'] LOOP
        FOR day IN SELECT generate_series(current_date,
                (now() AT TIME ZONE 'UTC')::date + 3, interval '1 day')::date LOOP
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                parent || '_p' || to_char(day, 'YYYYMMDD'), parent,
                day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
        END LOOP;
    END LOOP;
END
$$;
