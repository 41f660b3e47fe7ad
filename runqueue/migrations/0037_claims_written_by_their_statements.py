"""The claim of an attempt that ends other than by success is written out by
the statement that ends it (the fragments ``claim_cleared`` and
``claims_ended``), no longer by the trigger ``runqueue_run_log_kept``. A
``BEFORE UPDATE`` row trigger makes PostgreSQL lock the row before every
update of the runs table, whatever its ``WHEN``: a 54-byte WAL record on each
heartbeat, finish and move of a live run (docs/decisions/queue.md, "Claim and
success on the run's row").

Two checks take the trigger's place as the guard: a row holds a claim's event
only while running, succeeded or failed (a handler's failure keeps it on the
row, as a success does; the sweep's dead letter writes it out), and a
success's only while succeeded, so a statement that moves a run and forgets
its claim fails instead of losing it.
Added ``NOT VALID`` and then validated, each in a transaction of its own
(``atomic = False``): the trigger's drop and the checks' addition hold the
table's exclusive lock for a moment, the scan of every run only a lock that
lets writes go on. In one transaction the exclusive lock lasted the scans: a
live run's update waited 4.6 s at 10,000,000 runs (migrate 6.0 s).

A worker of the previous release ends an attempt other than by success
through the trigger; after this migration such a write fails the first check
and its run is retried once its lease expires, as after a crash: stop the
previous release's workers before migrating (docs/operations.md, Upgrading).
"""

from django.db import migrations, models

CLAIM = models.Q(claim_event_id__isnull=True) | models.Q(
    status__in=["running", "succeeded", "failed"]
)
SUCCESS = models.Q(success_event_id__isnull=True) | models.Q(status="succeeded")

# Each a transaction of its own; the first may be run again after a failed
# validation (IF EXISTS, the checks dropped and added again). It takes the
# table's lock first, parent before partitions: writes wait the moment it
# lasts instead of deadlocking with the drop's lock of each partition.
FORWARD = """
BEGIN;
LOCK TABLE runqueue_run IN ACCESS EXCLUSIVE MODE;
DROP TRIGGER IF EXISTS runqueue_run_log_kept ON runqueue_run;
DROP FUNCTION IF EXISTS runqueue_run_log_kept();
ALTER TABLE runqueue_run DROP CONSTRAINT IF EXISTS runqueue_run_claim_held;
ALTER TABLE runqueue_run DROP CONSTRAINT IF EXISTS runqueue_run_success_held;
ALTER TABLE runqueue_run ADD CONSTRAINT runqueue_run_claim_held
    CHECK (claim_event_id IS NULL OR status IN ('running', 'succeeded', 'failed')) NOT VALID;
ALTER TABLE runqueue_run ADD CONSTRAINT runqueue_run_success_held
    CHECK (success_event_id IS NULL OR status = 'succeeded') NOT VALID;
COMMIT;
"""
VALIDATE = "ALTER TABLE runqueue_run VALIDATE CONSTRAINT {};"

BACKWARD = """
ALTER TABLE runqueue_run DROP CONSTRAINT runqueue_run_claim_held;
ALTER TABLE runqueue_run DROP CONSTRAINT runqueue_run_success_held;
CREATE FUNCTION runqueue_run_log_kept() RETURNS trigger
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
CREATE TRIGGER runqueue_run_log_kept
BEFORE UPDATE ON runqueue_run
FOR EACH ROW
WHEN ((OLD.claim_event_id IS NOT NULL OR OLD.success_event_id IS NOT NULL)
      AND OLD.status IS DISTINCT FROM NEW.status
      AND NOT (OLD.status = 'running' AND NEW.status = 'succeeded'))
EXECUTE FUNCTION runqueue_run_log_kept();
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runqueue", "0036_tenant_index_in_list_order"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.CheckConstraint(
                        condition=CLAIM, name="runqueue_run_claim_held"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.CheckConstraint(
                        condition=SUCCESS, name="runqueue_run_success_held"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(FORWARD, BACKWARD),
                migrations.RunSQL(
                    VALIDATE.format("runqueue_run_claim_held"), migrations.RunSQL.noop
                ),
                migrations.RunSQL(
                    VALIDATE.format("runqueue_run_success_held"), migrations.RunSQL.noop
                ),
            ],
        ),
    ]
