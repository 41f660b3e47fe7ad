"""Sub-agents and durable waits (docs/decisions.md, "Sub-agents and durable
waits"): a run's parent and its open children, the non-terminal status
``waiting`` with what a waiting run waits for and until when, the signal
mailbox, and runqueue_join, the fan-in each child's terminal transition
calls.

``waiting`` joins the live partition's list (detached and attached again
with the new list, migration 0009) and the one-active-run-per-session
index, which lives on the live partition alone; the deadline and waiting
indexes are on it too. Runs already waiting for the user wait for reason
``user`` from now on.

FUNCTIONS is functions.sql's runqueue_join as it was when written (a
migration is history; see 0006_function_source).
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

_OLD_LIVE = "'queued', 'running', 'waiting_for_user'"
_LIVE = "'queued', 'running', 'waiting_for_user', 'waiting'"
_WAITS = "'waiting', 'waiting_for_user'"

LIVE_FORWARD = f"""
ALTER TABLE runqueue_run DETACH PARTITION runqueue_run_live;
ALTER TABLE runqueue_run ATTACH PARTITION runqueue_run_live FOR VALUES IN ({_LIVE});
DROP INDEX runqueue_run_one_active_per_session;
CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run_live (tenant, session_id)
    WHERE status IN ({_LIVE});
CREATE INDEX runqueue_run_deadline_idx ON runqueue_run_live (wait_until)
    WHERE status IN ({_WAITS}) AND wait_until IS NOT NULL;
CREATE INDEX runqueue_run_waiting_idx ON runqueue_run_live (wait_reason, id)
    WHERE status IN ({_WAITS});
UPDATE runqueue_run SET wait_reason = 'user', waiting_since = coalesce(started_at, created_at)
 WHERE status = 'waiting_for_user';
"""  # noqa: S608

LIVE_BACKWARD = f"""
DROP INDEX runqueue_run_deadline_idx, runqueue_run_waiting_idx;
DROP INDEX runqueue_run_one_active_per_session;
ALTER TABLE runqueue_run DETACH PARTITION runqueue_run_live;
ALTER TABLE runqueue_run ATTACH PARTITION runqueue_run_live FOR VALUES IN ({_OLD_LIVE});
CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run_live (tenant, session_id)
    WHERE status IN ({_OLD_LIVE});
"""

FUNCTIONS = r"""
-- The fan-in (docs/decisions.md, "Sub-agents and durable waits"), called by
-- every statement that makes runs with a parent terminal (a finish, a dead
-- letter, a cancel), in that statement, with the parents' ids: one per
-- child, repeats counted. Each parent's children_open goes down under its
-- row lock, so children ending at once count one after the other; a parent
-- waiting for its children whose count reaches 0 is queued again here
-- (resumed, a new epoch, run.resumed), exactly once: its wait begins only
-- under the same row lock and, if no child is open then, resumes at once
-- instead. Parents already terminal are left alone (the live partition's
-- statuses). VOLATILE: each statement inside sees the rows as they are
-- when its locks are held. Returns how many parents resumed; each resume
-- NOTIFYs p_channel so idle workers claim it at once.
CREATE OR REPLACE FUNCTION runqueue_join(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
BEGIN
    IF p_parents IS NULL OR cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- In id order: two statements counting in the same parents lock them
    -- in the same order.
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id
             ORDER BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN ('queued', 'running', 'waiting_for_user', 'waiting');
    WITH woken AS (
        UPDATE runqueue_run r
           SET status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               input = NULL,
               timed_out = false,
               wait_reason = '',
               wait_name = '',
               waiting_since = NULL,
               wait_until = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$fn$;
"""

_ACTIVE = ("queued", "running", "waiting_for_user", "waiting")
_STATUSES = [*_ACTIVE, "succeeded", "failed", "cancelled"]


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0011_budgets"),
    ]

    operations = [
        migrations.CreateModel(
            name="Signal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=255)),
                ("data", models.JSONField(blank=True, null=True)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="signals",
                        to="runqueue.run",
                    ),
                ),
            ],
            options={
                "db_table": "runqueue_signal",
                "ordering": ["id"],
                "indexes": [
                    models.Index(fields=["run", "name", "id"], name="runqueue_signal_run_idx")
                ],
            },
        ),
        migrations.AddField(
            model_name="run",
            name="children_open",
            field=models.IntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name="run",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="children",
                to="runqueue.run",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="timed_out",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="run",
            name="wait_name",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AddField(
            model_name="run",
            name="wait_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("children", "Its children"),
                    ("signal", "A signal"),
                    ("timer", "A time"),
                    ("user", "The user"),
                ],
                db_default="",
                default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="wait_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="waiting_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("waiting_for_user", "Waiting for user"),
                    ("waiting", "Waiting"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed (dead-lettered)"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=20,
            ),
        ),
        migrations.RemoveConstraint(model_name="run", name="runqueue_run_status_valid"),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", _STATUSES)), name="runqueue_run_status_valid"
            ),
        ),
        migrations.RemoveConstraint(
            model_name="run", name="runqueue_run_terminal_has_finished_at"
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", _ACTIVE), ("finished_at__isnull", False), _connector="OR"
                ),
                name="runqueue_run_terminal_has_finished_at",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("children_open__gte", 0)),
                name="runqueue_run_children_open_gte_0",
            ),
        ),
        # On every partition.
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)),
                fields=["parent"],
                name="runqueue_run_parent_idx",
            ),
        ),
        # The live partition's: its bound, the session index, the wait indexes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="run", name="runqueue_run_one_active_per_session"
                ),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("status__in", _ACTIVE)),
                        fields=("tenant", "session_id"),
                        name="runqueue_run_one_active_per_session",
                    ),
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(
                            ("status__in", ("waiting", "waiting_for_user")),
                            ("wait_until__isnull", False),
                        ),
                        fields=["wait_until"],
                        name="runqueue_run_deadline_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(("status__in", ("waiting", "waiting_for_user"))),
                        fields=["wait_reason", "id"],
                        name="runqueue_run_waiting_idx",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(LIVE_FORWARD, LIVE_BACKWARD)],
        ),
        migrations.RunSQL(FUNCTIONS, reverse_sql="DROP FUNCTION runqueue_join(uuid[], text)"),
    ]
