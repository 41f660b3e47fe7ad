-- The event log's functions: the NOTIFY of a watched run's event, and the
-- events a run's row holds.

-- function: runqueue_event_notify --
-- One NOTIFY on runqueue_events per appended event of a watched run. Its trigger fires after
-- every insert into runqueue_run_event, so no insert path can forget it
-- (docs/decisions/history.md, "The event stream").
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
-- A run.claimed event's data (lease owner and token, attempt, priority, wait) built from the
-- run's row: by runqueue_event_log while the row holds the claim, by runqueue_run_log_kept after
-- (docs/decisions/queue.md, "Claim and success on the run's row").
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
-- Before a run's row leaves the state whose events it holds (claim, success), they become event
-- rows under their ids and times; the trigger's WHEN skips claims, heartbeats and successes.
-- Why: docs/decisions/queue.md, "Claim and success on the run's row".
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
