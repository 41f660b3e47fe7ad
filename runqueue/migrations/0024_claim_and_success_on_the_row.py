"""A run's claim and its success are read from its row, not written as
event rows: on the 8-slot drain they were two of a finished run's three
row writes beside the row's own, ~650 B of WAL and two trigger calls per
run (docs/performance.md, "Claim and success on the run's row").

- ``runqueue_run`` gains ``claim_event_id``, ``claimed_at`` and
  ``claim_wait_ms`` (set by every claim: an id from the events' sequence,
  the claim's time and the run's wait) and ``success_event_id`` (set by a
  success); a success keeps the lease's owner and token on the row. A
  submit whose ``run.created`` says only the run's priority (no start
  deadline, budget, place in line or interrupted run) sets
  ``created_event_id`` and writes no event row either.
- ``runqueue_event_log``, a view: the event rows, and the creation, the
  claim and the success built from the rows that hold them (``runqueue_claimed_data``);
  every reader of a run's events reads it (``EventLog``).
- ``runqueue_run_log_kept``, a trigger before an update of a run that
  leaves the state whose events its row holds (an attempt that fails, is
  requeued, waits or is cancelled; a succeeded run moved again): it writes
  them as event rows under the same ids and times, so the log is the same
  before and after.

Nothing is copied: the events written before this migration are rows and
stay rows. Backwards, the events rows hold are written as event rows first.
The columns are added without a default: no table is rewritten.

FUNCTIONS is functions.sql's text of the two as it was when written (a
migration is history; see 0006_function_source).
"""

from django.db import migrations, models

FUNCTIONS = r"""
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

-- Before a run's row leaves the state whose events it holds (migration
-- 0024): an attempt's claim, held from the claim while the run runs and
-- after it succeeds, and the success, held while it stays succeeded. When
-- the row moves on (a failure, a requeue, a give-back, a wait, a cancel;
-- a succeeded run, should anything move it), the events it held are written
-- as event rows, under the ids and times the row gave them, and the row lets them
-- go: the log (runqueue_event_log) shows each event once, before and after.
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
"""

# The events rows hold (the claim, the success, the creation), as the view
# reads them and as the backwards migration writes them out.
HELD = """
SELECT r.claim_event_id, r.id, 'run.claimed'::varchar(64), r.lease_epoch,
       runqueue_claimed_data(r.lease_owner, r.lease_token, r.attempts, r.priority,
                             r.claim_wait_ms),
       r.claimed_at
  FROM runqueue_run r
 WHERE r.claim_event_id IS NOT NULL
UNION ALL
SELECT r.success_event_id, r.id, 'run.succeeded'::varchar(64), r.lease_epoch,
       jsonb_build_object('attempt', r.attempts), r.finished_at
  FROM runqueue_run r
 WHERE r.success_event_id IS NOT NULL
UNION ALL
SELECT r.created_event_id, r.id, 'run.created'::varchar(64), 0::bigint,
       jsonb_build_object('priority', r.priority), r.created_at
  FROM runqueue_run r
 WHERE r.created_event_id IS NOT NULL
"""

VIEW = f"""
CREATE VIEW runqueue_event_log AS
SELECT e.id, e.run_id, e.type, e.lease_epoch, e.data, e.created_at
  FROM runqueue_run_event e
UNION ALL
{HELD};
"""  # noqa: S608 - HELD is this module's constant text, no input

TRIGGER = """
CREATE TRIGGER runqueue_run_log_kept
BEFORE UPDATE ON runqueue_run
FOR EACH ROW
WHEN ((OLD.claim_event_id IS NOT NULL OR OLD.success_event_id IS NOT NULL)
      AND OLD.status IS DISTINCT FROM NEW.status
      AND NOT (OLD.status = 'running' AND NEW.status = 'succeeded'))
EXECUTE FUNCTION runqueue_run_log_kept();
"""

# Backwards: what the rows hold becomes event rows (HELD: read from the runs
# alone, one pass over them, none over the events), then the view, the
# trigger and the functions go.
BACKWARD = f"""
INSERT INTO runqueue_run_event (id, run_id, type, lease_epoch, data, created_at)
{HELD};
DROP VIEW runqueue_event_log;
DROP TRIGGER runqueue_run_log_kept ON runqueue_run;
DROP FUNCTION runqueue_run_log_kept();
DROP FUNCTION runqueue_claimed_data(text, uuid, integer, integer, integer);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0023_event_key_by_run"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="claim_event_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="claimed_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="claim_wait_ms",
            field=models.IntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="success_event_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="created_event_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(FUNCTIONS + VIEW + TRIGGER, BACKWARD),
        migrations.CreateModel(
            name="EventLog",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("type", models.CharField(max_length=64)),
                ("lease_epoch", models.BigIntegerField()),
                ("data", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField()),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=models.deletion.DO_NOTHING,
                        related_name="log",
                        to="runqueue.run",
                    ),
                ),
            ],
            options={
                "db_table": "runqueue_event_log",
                "ordering": ["id"],
                "managed": False,
            },
        ),
    ]
