"""Inbound events (docs/decisions.md, "Inbound events"): the events other
systems send (``runqueue_inbound_event``, once per tenant, name and key),
which runs took which event (``runqueue_event_delivery``), the admin's
triggers (``runqueue_event_trigger``), and a run's wait for an event: the
reason ``event`` and the match (``wait_match``), with a partial index of
the live partition's event waits by tenant and name (what an event's insert
looks up).

The resume fragment now clears ``wait_match`` too, so runqueue_join and
runqueue_recount (which include it) are installed again; they do what
0020's did. FUNCTIONS is functions.sql's text of the two as it was when
written (a migration is history; see 0006_function_source); PREVIOUS,
0020's. A nullable column and new tables: no row is rewritten.
"""

from importlib import import_module

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

_0020 = import_module("runqueue.migrations.0020_resume_once")

PREVIOUS = "\n\n".join(
    (
        _0020._function(_0020.FUNCTIONS, "runqueue_join"),
        _0020._function(_0020.FUNCTIONS, "runqueue_recount"),
    )
)

INDEX_FORWARD = """
CREATE INDEX runqueue_run_event_wait_idx ON runqueue_run_live (tenant, wait_name)
    WHERE status = 'waiting' AND wait_reason = 'event';
"""
INDEX_BACKWARD = "DROP INDEX runqueue_run_event_wait_idx;"

FUNCTIONS = r"""
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
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
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
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN (
           -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
           'queued', 'running', 'waiting_for_user', 'waiting'
           );
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET input = NULL,
               timed_out = false,
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
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
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
    UPDATE runqueue_run r
       SET children_open =
           -- How many children of run r are open: the live partition's parent index.
           (SELECT count(*)::integer
              FROM runqueue_run c
             WHERE c.parent_id = r.id
               AND c.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   ))
     WHERE r.id = ANY(p_parents)
       AND r.status IN (
           -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
           'queued', 'running', 'waiting_for_user', 'waiting'
           );
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET input = NULL,
               timed_out = false,
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


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0029_webhooks"),
    ]

    operations = [
        migrations.CreateModel(
            name="InboundEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tenant", models.CharField(max_length=255)),
                ("name", models.CharField(max_length=255)),
                ("key", models.CharField(max_length=255)),
                ("data", models.JSONField(default=dict)),
                (
                    "received_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("principal", models.CharField(blank=True, default="", max_length=255)),
                ("started", models.JSONField(blank=True, default=list)),
            ],
            options={
                "verbose_name": "inbound event",
                "db_table": "runqueue_inbound_event",
                "ordering": ["-id"],
                "indexes": [
                    models.Index(
                        fields=["tenant", "name", "received_at"], name="runqueue_inbound_name_idx"
                    ),
                    models.Index(fields=["received_at"], name="runqueue_inbound_age_idx"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "name", "key"), name="runqueue_inbound_event_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="EventDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "delivered_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="event_deliveries",
                        to="runqueue.run",
                    ),
                ),
                (
                    "event",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="runqueue.inboundevent",
                    ),
                ),
            ],
            options={
                "db_table": "runqueue_event_delivery",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "event"), name="runqueue_event_delivery_once"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="EventTrigger",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(help_text="The event's name.", max_length=255)),
                (
                    "match",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="A JSON object the event's data must contain, e.g. "
                        '{"plan": "pro"}; {} matches every event of the name.',
                    ),
                ),
                ("kind", models.CharField(help_text="The kind of run it starts.", max_length=255)),
                (
                    "priority",
                    models.PositiveSmallIntegerField(
                        default=10, help_text="The started run's priority."
                    ),
                ),
                (
                    "tenant",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Only this tenant's events; empty for every tenant's.",
                        max_length=255,
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                ("note", models.CharField(blank=True, default="", max_length=255)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={
                "db_table": "runqueue_event_trigger",
                "ordering": ["name", "id"],
                "indexes": [models.Index(fields=["name"], name="runqueue_trigger_name_idx")],
            },
        ),
        migrations.AddField(
            model_name="run",
            name="wait_match",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="wait_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("children", "Its children"),
                    ("signal", "A signal"),
                    ("timer", "A time"),
                    ("user", "The user"),
                    ("event", "An inbound event"),
                ],
                db_default="",
                default="",
                max_length=16,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(("status", "waiting"), ("wait_reason", "event")),
                        fields=["tenant", "wait_name"],
                        name="runqueue_run_event_wait_idx",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(INDEX_FORWARD, INDEX_BACKWARD)],
        ),
        migrations.RunSQL(FUNCTIONS, reverse_sql=PREVIOUS),
    ]
