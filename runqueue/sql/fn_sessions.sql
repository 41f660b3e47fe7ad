-- Sessions: the next pending turn queued when a session's active run ends.

-- function: runqueue_promote --
-- A session's next turn, called by every statement that ends runs, with their tenants and
-- sessions: each session with no active run left queues its first pending turn (run.promoted,
-- a NOTIFY). Returns how many (docs/decisions.md, "Busy sessions: on_busy").
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
