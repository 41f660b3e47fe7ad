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
-- run's row: by runqueue_event_log while the row holds the claim, by the statement that takes it
-- off the row after (claims_ended; docs/decisions/queue.md, "Claim and success on the run's row").
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
