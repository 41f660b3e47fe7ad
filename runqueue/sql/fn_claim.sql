-- What a run must be to be claimed (due, claimable), which worker claims it at
-- which version, and the capped claim's walk. The walk's own filters are the
-- last two fragments, without comments (a function stores what it includes):
-- has_version, a kind and version the claiming worker has, and
-- budget_not_blocked, not of a budget the walk stepped over in this call.

-- fragment: due --
-- Due: queued, its time come (on the database clock), attempts left, and
-- not paused (runqueue.pausing.pause_run: a column on the row already read,
-- never a read of another table).
AND q.status = 'queued'
AND (q.scheduled_for IS NULL OR q.scheduled_for <= now())
AND q.attempts < q.max_attempts
AND q.paused_at IS NULL

-- fragment: claimable --
-- Claimable: due, not past its start deadline (start_within: the deadline
-- service cancels it as expired, docs/decisions.md "Run deadlines"), and
-- its kind not paused (in all classes, or in its class). The pause test
-- is a subplan per candidate run, never a join: OFFSET 0 keeps the planner
-- from pulling it up into an anti-join, which it may make a hash join when
-- runqueue_paused_kind has no statistics (never analyzed: a table nobody
-- paused a kind in), and a hash join's rows come unordered: the claim would
-- sort every due run instead of reading the claim index's first few
-- (docs/performance.md, "A claim's plan whatever the statistics").
-- include: due --
AND (q.start_by IS NULL OR q.start_by > now())
AND NOT EXISTS (SELECT 1 FROM runqueue_paused_kind p
                 WHERE p.kind = q.kind
                   AND (p.priority_class IS NULL
                        OR p.priority_class
                           = runqueue_priority_class_low(
                                 runqueue_priority_class(q.priority)))
                OFFSET 0)

-- function: runqueue_between_turns --
-- A run is between turns when a newer handler version would replay none of its steps: its last
-- checkpoint ended a turn and no step came after, or it has neither. Two unique-index probes
-- (docs/decisions/run-trees.md, "Versions and rolling deploys").
CREATE OR REPLACE FUNCTION runqueue_between_turns(p_run uuid) RETURNS boolean
LANGUAGE sql STABLE
AS $fn$
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
$fn$;

-- function: runqueue_claim_version --
-- The version of its kind's handler a worker runs a run at, or NULL: it must not claim it. New
-- runs take the newest, pinned ones keep theirs or move between turns; inlined by the planner
-- (docs/decisions/run-trees.md, "Versions and rolling deploys").
CREATE OR REPLACE FUNCTION runqueue_claim_version(
    p_run uuid,
    p_kind text,
    p_pinned integer,
    p_kinds text[],
    p_newest integer[],
    p_versions text[],
    p_moves text[],
    p_move_to integer[]
) RETURNS integer
LANGUAGE sql STABLE
AS $fn$
SELECT CASE
           WHEN NOT (p_kind = ANY(p_kinds)) THEN NULL
           WHEN p_pinned IS NULL THEN p_newest[array_position(p_kinds, p_kind)]
           WHEN (p_kind || ':' || p_pinned) = ANY(p_moves) AND runqueue_between_turns(p_run)
               THEN p_move_to[array_position(p_moves, p_kind || ':' || p_pinned)]
           WHEN (p_kind || ':' || p_pinned) = ANY(p_versions) THEN p_pinned
       END
$fn$;

-- function: runqueue_claim_capped --
-- The capped claim's walk, called once by the capped claims: VOLATILE, so each count follows its
-- (key, class) lock; steps over a (key, class) locked, at its cap or a budget refused, key by key
-- past a long backlog (docs/decisions.md, "Concurrency caps", "Budgets").
CREATE OR REPLACE FUNCTION runqueue_claim_capped(
    p_limit integer,
    p_min_priority integer,
    p_max_priority integer,
    p_class_indexes integer[],
    p_default_caps integer[],
    p_finishing_ids uuid[],
    p_finishing_epochs bigint[],
    p_finishing_tokens uuid[],
    -- The worker's kinds and versions (runqueue_claim_version).
    p_kinds text[],
    p_newest integer[],
    p_versions text[],
    p_moves text[],
    p_move_to integer[]
) RETURNS uuid[]
LANGUAGE plpgsql VOLATILE
-- Plan the candidate cursors for all their rows (they are LIMITed), not for
-- a fast first tenth: that picks a walk of the claim index per key.
SET cursor_tuple_fraction = 1
AS $fn$
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
                   -- include: budget_not_blocked --
                   -- include: claimable --
                   -- A kind and version this worker has (functions.sql).
                   -- include: has_version --
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
                        -- include: budget_not_blocked --
                        -- A paused kind is not filtered here: the lock's
                        -- re-check below does it.
                        -- include: due --
                        -- include: has_version --
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
               -- include: claimable --
               -- Its pin read again: a claim and a release since the
               -- candidates were read may have moved it to another version.
               -- include: has_version --
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
$fn$;

-- fragment: has_version --
AND runqueue_claim_version(q.id, q.kind, q.handler_version, p_kinds,
                           p_newest, p_versions, p_moves,
                           p_move_to) IS NOT NULL

-- fragment: budget_not_blocked --
AND (q.budget_key IS NULL
     OR NOT (q.budget_key = ANY(budgets_blocked)
             OR (q.budget_key || '|' || q.tenant) = ANY(budgets_blocked)))
