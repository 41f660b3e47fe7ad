-- The event log's functions: the NOTIFY of a watched run's event, and the
-- events a run's row holds.

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
-- measured it: claim_set, claim.sql). Built from the run's row, by the
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
