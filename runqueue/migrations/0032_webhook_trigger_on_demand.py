"""The webhooks' row trigger on the runs table only while an active endpoint
exists (docs/decisions.md, "Webhooks"): installed by 0029 on every queue, it
cost each finished run a plpgsql call and a read of the endpoints table with
no endpoint at all (docs/performance.md). runqueue_webhook_sync, a statement
trigger of the endpoints table, now creates it with the first active endpoint
and drops it with the last, in that write's transaction; this migration
drops it where no endpoint is active.

FUNCTIONS is functions.sql's text of the function as it was when written (a
migration is history; see 0006_function_source).
"""

from django.db import migrations

FUNCTIONS = r"""
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

"""

FORWARD = """
CREATE TRIGGER runqueue_webhook_endpoint_sync
AFTER INSERT OR UPDATE OR DELETE ON runqueue_webhook_endpoint
FOR EACH STATEMENT
EXECUTE FUNCTION runqueue_webhook_sync();
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM runqueue_webhook_endpoint WHERE active) THEN
        DROP TRIGGER IF EXISTS runqueue_run_webhook ON runqueue_run;
    END IF;
END
$$;
"""

BACKWARD = """
DROP TRIGGER runqueue_webhook_endpoint_sync ON runqueue_webhook_endpoint;
DROP FUNCTION runqueue_webhook_sync();
CREATE OR REPLACE TRIGGER runqueue_run_webhook
BEFORE UPDATE ON runqueue_run
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'waiting_for_user')
      AND NEW.kind <> 'runqueue.webhook')
EXECUTE FUNCTION runqueue_webhook_run();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0031_session_reads"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS + FORWARD, BACKWARD),
    ]
