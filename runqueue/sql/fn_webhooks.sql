-- Webhooks: an event's deliveries, enqueued in its transaction.

-- function: runqueue_webhook_enqueue --
-- An event's webhook deliveries, in the event's transaction: one per URL that receives it,
-- each with the maintenance run that sends it; p_message, the webhook-id, makes it once per
-- URL whatever fires twice (docs/decisions/schedules-webhooks.md, "Webhooks").
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
-- Before a run's row moves to a status a webhook reports (its trigger's WHEN): that event's
-- deliveries, in the transition's transaction. The body: the run as the transition leaves it,
-- a result up to 64 KiB, a failure without its traceback.
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
-- After a write to the endpoints table: the row trigger runqueue_run_webhook exists exactly
-- while an active endpoint does, so a queue without webhooks pays nothing; syncs take an
-- advisory lock first (docs/decisions/schedules-webhooks.md, "Webhooks").
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
