-- The functions runqueue installs in the database, as they are now: the one
-- source of their text. Each block starts with "-- function: NAME --" and is
-- the function's CREATE OR REPLACE statement. A "-- fragment: NAME --" block
-- is SQL that functions and the statements of queries.sql share; a line
-- "-- include: NAME --" stands for it, indented as that line is (put in when
-- the files are loaded, runqueue/sql/__init__.py). What a run must be to be
-- claimed is written once, in the fragments due and claimable (on a run
-- aliased q; each line an AND, so an include follows a first condition):
-- the plain claim (queries.sql) and runqueue_claim_capped include them.
-- So are the resume of a waiting run (resume), the active and the live
-- statuses (active_statuses, live_statuses; runqueue.models); the give-back
-- of a lease is in queries.sql (give_back). tests/unit/test_sql_fragments.py
-- checks that none is written out anywhere else.
--
-- A migration is history, so it holds a frozen copy of the text, not a call:
-- to change a function (or a fragment one includes), edit it here and add a
-- migration that runs the new text (runqueue.sql.functions_sql(), pasted in;
-- see 0006_function_source). tests/database/test_functions.py checks that the migrated
-- database's functions are exactly this file's.

-- function: runqueue_priority_class --
-- The index of a priority's class (runqueue.models.PriorityClass). The class
-- functions are LANGUAGE sql IMMUTABLE with a one-line body and no STRICT or
-- SET: the planner inlines them, so a statement plans as it would with the
-- arithmetic written in place. tests/database/test_queries.py checks them against
-- PriorityClass (runqueue.sql.classes renders them from it).
CREATE OR REPLACE FUNCTION runqueue_priority_class(priority integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT least(priority / 10, 2)$$;

-- function: runqueue_priority_class_low --
-- The lowest priority of the class at idx: the class's value, as
-- ConcurrencyLimit and PausedKind store it. NULL for no class.
CREATE OR REPLACE FUNCTION runqueue_priority_class_low(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 0 WHEN 1 THEN 10 WHEN 2 THEN 20 END$$;

-- function: runqueue_priority_class_high --
-- The highest priority of the class at idx. NULL for no class.
CREATE OR REPLACE FUNCTION runqueue_priority_class_high(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 9 WHEN 1 THEN 19 WHEN 2 THEN 32767 END$$;

-- function: runqueue_priority_classes --
-- Every class as (idx, low, high), in order.
CREATE OR REPLACE FUNCTION runqueue_priority_classes()
    RETURNS TABLE (idx integer, low integer, high integer)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$VALUES (0, 0, 9), (1, 10, 19), (2, 20, 32767)$$;

-- function: runqueue_event_notify --
-- One NOTIFY per appended event of a watched run, on the channel
-- runqueue_events with the run id as payload; nothing for the others. The
-- trigger that calls it (migration 0003) fires after every insert into
-- runqueue_run_event, so no insert path can forget it (docs/decisions.md,
-- "Event stream").
CREATE OR REPLACE FUNCTION runqueue_event_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = NEW.run_id) THEN
        PERFORM pg_notify('runqueue_events', NEW.run_id::text);
    END IF;
    RETURN NULL;
END
$$;

-- function: runqueue_claimed_data --
-- A run.claimed event's data: the lease's owner and token, the attempt, the
-- priority and how long the run waited since it became due (the claim
-- measured it: claim_set, queries.sql). Built from the run's row, by the
-- view runqueue_event_log while the row holds the claim and by
-- runqueue_run_log_kept when the attempt ends otherwise (migration 0024;
-- docs/decisions.md, "Claim and success on the run's row").
CREATE OR REPLACE FUNCTION runqueue_claimed_data(
    p_owner text, p_token uuid, p_attempt integer, p_priority integer, p_wait_ms integer)
RETURNS jsonb
LANGUAGE sql STABLE
AS $fn$
SELECT jsonb_build_object(
           'owner', p_owner,
           'token', p_token,
           'attempt', p_attempt,
           'priority', p_priority,
           'wait_ms', p_wait_ms)
$fn$;

-- function: runqueue_run_log_kept --
-- Before a run's row leaves the state whose events it holds (migration
-- 0024): an attempt's claim, held from the claim while the run runs and
-- after it succeeds, and the success, held while it stays succeeded. When
-- the row moves on (a failure, a requeue, a give-back, a wait, a cancel;
-- a succeeded run, should anything move it), the events it held are
-- written as event rows, under the ids and times the row gave them, and the
-- row lets them go: the log (runqueue_event_log) shows each event once,
-- before and after.
-- The trigger that calls it fires only then (its WHEN), never for a claim,
-- a heartbeat or a success.
CREATE OR REPLACE FUNCTION runqueue_run_log_kept() RETURNS trigger
LANGUAGE plpgsql AS $fn$
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
$fn$;

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
-- A run is between turns when a newer version of its handler would replay
-- none of its steps: its last checkpoint ended a turn (ask_user, a wait for
-- children, a signal or a time: turn_end) and no step (tool call, spawn,
-- patch decision) was recorded from that checkpoint's tool_seq on; or it
-- has no checkpoint and no step at all. Two probes of unique (run, seq)
-- indexes. docs/decisions.md, "Versions and rolling deploys".
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

-- function: runqueue_tree_root --
-- A run's tree root (the last ancestor found up its parents, itself for a
-- root) and the root's session: ctx.record_usage's tree, a fork's spend
-- cap. One primary-key probe per level, but over every partition of the
-- runs, so with months of history the plan's estimated cost passes
-- jit_above_cost and PostgreSQL would compile it (~400 ms at 2,000,000 runs)
-- to run a walk that takes a millisecond: SET jit = off, for this walk only.
-- PL/pgSQL so a session keeps the plan: planning the walk over the
-- partitions costs ~10 ms, more than running it.
CREATE OR REPLACE FUNCTION runqueue_tree_root(p_run uuid)
RETURNS TABLE (id uuid, session_id text)
LANGUAGE plpgsql STABLE
SET jit = off
AS $fn$
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
$fn$;

-- function: runqueue_claim_version --
-- The version of its kind's handler a worker runs a run at, or NULL when
-- that worker must not claim it: the one rule of which worker takes which
-- run (docs/decisions.md, "Versions and rolling deploys"), in the plain
-- claim's filter, in runqueue_claim_capped's and in what a claim writes
-- (claim_set). The worker's kinds (p_kinds, each one's newest version in
-- p_newest), the versions it has ('kind:version', p_versions) and the
-- moves it makes ('kind:from' in p_moves, to the version in p_move_to):
-- a run never claimed (p_pinned NULL) takes the newest version; a pinned
-- one keeps its version, or moves when its version is one the worker moves
-- and it is between turns. A one-line LANGUAGE sql function without a
-- subquery of its own: the planner inlines it, a filter on the claim
-- index's rows (runqueue_between_turns, called only for a move).
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
-- The capped claim's walk (docs/decisions.md, "Concurrency caps"), called
-- once by finish_and_claim_capped. VOLATILE: in READ COMMITTED every
-- statement inside takes a fresh snapshot, so the running count below is
-- taken after the (key, class) lock is held and sees every claim committed
-- before this one got the lock. Only a claim moves a run into running, and
-- every capped claim of a (key, class) holds its lock from the count to its
-- commit: the count plus what it claims never exceeds the cap. A (key,
-- class) whose lock another claimer holds is stepped over (no waiting), as
-- is one at its cap. The walk reads the claim index in claim order, 64 runs
-- at a time; once it steps over a (key, class) with 64 or more runs queued
-- ahead, or has stepped over 256 runs in all, it goes key by key instead
-- (each key's next runs from runqueue_run_key_idx, merged in claim order),
-- so a long backlog at its cap costs one index probe per key with queued
-- runs, not one row per run. Runs are locked one at a time, only when
-- chosen: stepping over writes nothing. A run with a budget is chosen only
-- once runqueue_budget_take reserved its call (docs/decisions.md,
-- "Budgets"), after its lock: a budget another claimer holds or a paused
-- one is stepped over for this call, a tenant whose call does not fit or
-- whose turn it is not is stepped over on that budget (the walk goes on to
-- other tenants' and other runs, so their asking is seen).
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
                   AND (q.budget_key IS NULL
                        OR NOT (q.budget_key = ANY(budgets_blocked)
                                OR (q.budget_key || '|' || q.tenant) = ANY(budgets_blocked)))
                   -- include: claimable --
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
                        -- include: due --
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
               -- include: claimable --
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
$fn$;

-- function: runqueue_budget_bucket --
-- The bucket of a budget's window that instant "at" falls in: a window of
-- per_seconds is ten buckets, and a budget's row keeps eleven (a ring,
-- runqueue_budget.ring_*), so every window of per_seconds lies within the
-- buckets a reservation counts (docs/decisions.md, "Budgets").
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
-- Add tokens and requests to the ring's bucket n of a budget's row (locked
-- by the caller). It never resets a bucket newer than n: a slot holding an
-- older bucket starts again from zero; when n has left the ring (its slot
-- holds a bucket 11 or more newer, the caller's instant was read before a
-- long wait) a charge goes into the newest bucket instead, so what it adds
-- still counts, and a refund (negative) has nothing left to take back. A
-- refund comes off bucket n only while the ring holds it, and never takes
-- a bucket below zero.
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
-- Reserve one request and p_tokens on budget p_key for tenant p_tenant, now
-- (docs/decisions.md, "Budgets"): the claim's walk (p_wait false: a budget
-- another transaction holds is 'busy', never waited for) and ctx.reserve
-- (p_wait true) both call it. The budget's row lock is held to the
-- caller's commit and the window is read from the locked row's latest
-- version, so what racing claimers reserve never exceeds the window.
-- Answers 'taken'; 'unlimited' (no such budget: nothing counted); or why
-- not: 'busy', 'paused', 'requests' (no request left in the window),
-- 'tokens' (these tokens do not fit now), 'turn' (another tenant waiting
-- on the key has had less of it, by its share). A
-- reservation larger than the whole budget fits only an empty window.
-- Fair shares: each tenant's pass grows by what it reserves divided by its
-- share (stride scheduling); a tenant may reserve while no other tenant
-- with queued runs on the key, seen asking within one bucket, has a lower
-- pass. A tenant's pass never lags vtime (the least pass of the tenants
-- asking), so a tenant back from idle banks no credit. Every verdict but
-- 'busy' and 'paused' records the tenant as asking (seen).
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
-- Correct a reservation of p_reserved tokens made at p_at to p_used: a
-- refund comes off the bucket it was reserved in (if that bucket is still
-- in the ring: once it left the window there is nothing to give back); an
-- extra charge goes into the bucket of the moment this got the budget's
-- row (clock_timestamp(), as ctx.reserve counts from), so later
-- reservations wait for it. Not the transaction's now(): a settle that
-- waited over 1.1 windows for the row would charge a bucket whose ring
-- slot a newer one holds by then (runqueue_budget_charge never resets it).
-- The tenant's pass moves by the difference too. Returns the correction
-- (used - reserved), 0 without such a budget.
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
-- Give back a reservation whose call was never made (a run given back
-- before its handler started, docs/decisions.md "Budgets"): its request
-- and p_tokens come off the bucket of p_at, the instant it was reserved
-- at, while the ring holds that bucket (once it left the window there is
-- nothing to give back); the tenant's pass moves back by what the
-- reservation added to it, never below vtime. Returns whether the ring
-- still held it; false without such a budget.
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

-- fragment: active_statuses --
-- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
'queued', 'running', 'waiting_for_user', 'waiting'

-- fragment: live_statuses --
-- Live: not ended yet, a pending turn too (models.LIVE_STATUSES).
'queued', 'running', 'waiting_for_user', 'waiting', 'pending'

-- fragment: resume --
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

-- fragment: lock_parents --
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
               -- include: active_statuses --
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

-- fragment: open_children --
-- How many children of run r are open: the live partition's parent index.
(SELECT count(*)::integer
   FROM runqueue_run c
  WHERE c.parent_id = r.id
    AND c.status IN (
        -- include: active_statuses --
        ))

-- fragment: resume_joined --
-- Each run of p_parents that waits for its children and has none open is
-- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
WITH woken AS (
    UPDATE runqueue_run r
       SET input = NULL,
           timed_out = false,
           -- include: resume --
     WHERE r.id = ANY(p_parents)
       AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
    RETURNING r.id, r.lease_epoch
), logged AS (
    INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
    SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
      FROM woken w
)
SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;

-- function: runqueue_join --
-- The fan-in (docs/decisions.md, "Sub-agents and durable waits"), called by
-- every statement that makes runs with a parent terminal (a finish, a dead
-- letter, a cancel), in that statement, with the parents' ids: one per
-- child, repeats counted. Each parent is locked first, live or dead
-- (lock_parents); then each live parent's children_open goes down, so
-- children ending at once count one after the other; a parent waiting for
-- its children whose count reaches 0 is queued again here (resumed, a new
-- epoch, run.resumed), exactly once: its wait begins only under the same
-- row lock and, if no child is open then, resumes at once instead. A dead
-- letter's count is left alone, but locked: its requeue locks it before it
-- counts again (runqueue_recount), so a child's end is either committed
-- before that count or counted after it, never neither. A parent moved
-- between partitions while this waited for its lock (it finished, or was
-- requeued) fails the statement with 40001, nothing written: the caller
-- runs it again. VOLATILE: each statement inside sees the rows as they are
-- when its locks are held. Returns how many parents resumed; each resume
-- NOTIFYs p_channel so idle workers claim it at once.
CREATE OR REPLACE FUNCTION runqueue_join(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    IF p_parents IS NULL OR cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- include: lock_parents --
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN (
           -- include: active_statuses --
           );
    -- include: resume_joined --
    RETURN resumed;
END;
$fn$;

-- function: runqueue_recount --
-- Count the open children of each run in p_parents again, from their
-- statuses (open_children), under its row lock (lock_parents), and resume
-- one that waits for its children and has none open (resume_joined): an
-- operator's requeue calls it, after its own statement, for the requeued
-- run (its children may have ended while it was dead, and their joins left
-- its count alone) and for its parent (the run is open in it again). The
-- count is read in a statement after the lock, so it holds every child
-- transition committed before the lock; one not committed yet (its join
-- waits for this lock) counts in the result after. Terminal runs are left
-- alone. Returns how many resumed.
CREATE OR REPLACE FUNCTION runqueue_recount(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    p_parents := array_remove(p_parents, NULL);
    IF cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- include: lock_parents --
    UPDATE runqueue_run r
       SET children_open =
           -- include: open_children --
     WHERE r.id = ANY(p_parents)
       AND r.status IN (
           -- include: active_statuses --
           );
    -- include: resume_joined --
    RETURN resumed;
END;
$fn$;

-- function: runqueue_promote --
-- A session's next turn (docs/decisions.md, "Busy sessions: on_busy"),
-- called by every statement that makes runs terminal (a finish, a dead
-- letter, a cancel, an expiry), in that statement, with the tenants and
-- session ids of the runs it ended (NULL session ids are skipped). For each
-- session, in (tenant, session) order: if no run of it is active any more
-- (this statement's own changes are seen: a VOLATILE function's statements
-- read after the caller's), its first pending turn (the lowest place) is
-- queued: due now or at its scheduled time, run.promoted, a NOTIFY (its
-- epoch stays: a pending turn never had a lease to fence). Exactly one, and
-- only when the session has no active run: every write that adds a pending
-- turn holds the active run's row lock (submit's routing), and the
-- statement that ends that run holds it too, so a turn committed before
-- the end is seen here, and one added after finds the promoted run active
-- and lines up behind it. A turn another transaction holds (a cancel of
-- it, the deadline service expiring it) is stepped over (SKIP LOCKED): it
-- is ending, and the next is queued instead. Ending a pending turn calls
-- this too and changes nothing while the session has an active run.
-- Returns how many turns were queued.
CREATE OR REPLACE FUNCTION runqueue_promote(
    p_tenants text[], p_sessions text[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
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
                   -- include: active_statuses --
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
$fn$;

-- function: runqueue_webhook_enqueue --
-- An event's webhook deliveries, in the transaction of the event
-- (docs/decisions.md, "Webhooks"): one per URL that receives it (an
-- active endpoint whose filters match the run, and the run's own URL,
-- runqueue_webhook_target), each with the maintenance run that sends it
-- (kind runqueue.webhook, its endpoint's max_attempts; the workers' poll
-- finds it). p_message is the webhook-id: one per event, so a delivery is
-- written once per URL whatever fires twice (ON CONFLICT).
CREATE OR REPLACE FUNCTION runqueue_webhook_enqueue(
    p_run uuid, p_tenant text, p_principal text, p_kind text, p_type text,
    p_message text, p_data jsonb)
RETURNS void
LANGUAGE plpgsql AS $fn$
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
$fn$;

-- function: runqueue_webhook_run --
-- Before a run's row moves to a status a webhook reports (its trigger's
-- WHEN: succeeded, failed, cancelled, waiting_for_user; never a delivery's
-- own run): the deliveries of that event, in the transition's transaction.
-- The trigger exists only while an active endpoint does (runqueue_webhook_sync);
-- one left behind returns after one read of a small table. The
-- body holds the run as the transition leaves it: a result up to 64 KiB
-- (else result_omitted), a failure without its traceback.
CREATE OR REPLACE FUNCTION runqueue_webhook_run() RETURNS trigger
LANGUAGE plpgsql AS $fn$
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
$fn$;

-- function: runqueue_webhook_sync --
-- After any statement that writes the endpoints table (its trigger): the
-- row trigger runqueue_run_webhook exists exactly while an active endpoint
-- does, so a queue with no webhook pays nothing on a run's transition (no
-- trigger, no plpgsql call, no read). Syncs are serialized by a
-- transaction-scoped advisory lock taken before the endpoints are read: a
-- second sync reads after the first committed, so two transactions that
-- deactivate one endpoint and add another cannot leave the trigger off.
-- Creating or dropping the trigger waits for the runs table's writers
-- (SHARE ROW EXCLUSIVE), at most lock_timeout; a trigger left behind (a
-- TRUNCATE) still finds no active endpoint and returns at once.
CREATE OR REPLACE FUNCTION runqueue_webhook_sync() RETURNS trigger
LANGUAGE plpgsql
SET lock_timeout = '10s'
AS $fn$
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
$fn$;

-- function: runqueue_webhook_event --
-- After a tool.uncertain event row (its trigger's WHEN): the deliveries of
-- that event, in its transaction; the webhook-id names the event's id.
CREATE OR REPLACE FUNCTION runqueue_webhook_event() RETURNS trigger
LANGUAGE plpgsql AS $fn$
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
$fn$;
