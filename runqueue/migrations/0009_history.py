"""Months of history (issue 21): runs partitioned by status, finished runs
and events by day, so retention drops whole partitions and the live queue's
tables and indexes hold only live rows. decisions.md, "History and
retention", has the layout and why.

Existing rows are copied into the new layout: every run is found by id as
before. Foreign keys to runs become db_constraint=False (PostgreSQL cannot
reference a partitioned table's id unless the partition key is in it).
"""

import django.db.models.deletion
from django.db import migrations, models

_LIVE = "'queued', 'running', 'waiting_for_user'"
_TERMINAL = "'succeeded', 'failed', 'cancelled'"

# Day partitions (UTC) of a RANGE-partitioned table for every day from the
# first value of a column in existing rows up to three days ahead: the
# copied rows land in their day, and the worker's maintenance
# (runqueue.housekeeping.maintain_partitions) creates the days after that.
_DAYS = """
DO $$
DECLARE
    first_day date;
    day date;
BEGIN
    SELECT (min({column}) AT TIME ZONE 'UTC')::date INTO first_day FROM {source} {where};
    FOR day IN SELECT generate_series(
            least(coalesce(first_day, current_date), current_date),
            (now() AT TIME ZONE 'UTC')::date + 3, interval '1 day')::date LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF {parent} FOR VALUES FROM (%L) TO (%L)',
            '{parent}_p' || to_char(day, 'YYYYMMDD'),
            day::text || ' 00:00:00+00', (day + 1)::text || ' 00:00:00+00');
    END LOOP;
END
$$;
"""

RUNS_FORWARD = (
    f"""
ALTER TABLE runqueue_run RENAME TO runqueue_run_before_0009;
ALTER TABLE runqueue_run_before_0009 DROP CONSTRAINT runqueue_run_pkey;
DROP INDEX runqueue_run_claim_idx, runqueue_run_leased_idx, runqueue_run_key_idx,
    runqueue_run_one_active_per_session, runqueue_run_session_idx, runqueue_run_finished_idx,
    runqueue_run_created_idx, runqueue_run_failed_idx;

CREATE TABLE runqueue_run (LIKE runqueue_run_before_0009 INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY LIST (status);

-- The live partition: what claims, fences, the sweeper and the session
-- constraint read. fillfactor 80 as before: heartbeats stay HOT.
CREATE TABLE runqueue_run_live PARTITION OF runqueue_run FOR VALUES IN ({_LIVE})
    WITH (fillfactor = 80);
ALTER TABLE runqueue_run_live ADD CONSTRAINT runqueue_run_live_pkey PRIMARY KEY (id);
CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run_live (tenant, session_id)
    WHERE status IN ({_LIVE});
CREATE INDEX runqueue_run_claim_idx ON runqueue_run_live (priority, created_at)
    WHERE status = 'queued';
CREATE INDEX runqueue_run_leased_idx ON runqueue_run_live (status, id)
    WHERE status IN ('running', 'waiting_for_user');
-- The claim tests the class of each run (runqueue_priority_class, inlined):
-- without statistics on that expression the planner guesses 0.5 % of the
-- rows match, and on a live partition of a few tens of thousands of queued
-- runs it prefers a sequential scan and a sort to the claim index.
CREATE STATISTICS runqueue_run_live_class_stats ON (runqueue_priority_class(priority))
    FROM runqueue_run_live;
CREATE INDEX runqueue_run_key_idx ON runqueue_run_live (concurrency_key, status, priority, created_at)
    WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'running');

-- No status outside the two lists is stored: this empty partition takes
-- such a row only for runqueue_run_status_valid to refuse it by name.
CREATE TABLE runqueue_run_invalid PARTITION OF runqueue_run DEFAULT;

-- Finished runs, a partition per day of finished_at, and a default for a
-- day nobody made a partition for yet.
CREATE TABLE runqueue_run_finished PARTITION OF runqueue_run FOR VALUES IN ({_TERMINAL})
    PARTITION BY RANGE (finished_at);
CREATE TABLE runqueue_run_finished_default PARTITION OF runqueue_run_finished DEFAULT;
CREATE INDEX runqueue_run_finished_id_idx ON runqueue_run_finished (id);
-- The console's kind and class filters over history. Not on the live
-- partition: every claim would write them, and the claim index would
-- compete with the class index for the claim.
CREATE INDEX runqueue_run_kind_idx ON runqueue_run_finished (kind, created_at);
CREATE INDEX runqueue_run_priority_idx ON runqueue_run_finished (priority, created_at);

-- Every partition: the console's lists, filters and searches.
CREATE INDEX runqueue_run_created_idx ON runqueue_run (created_at, id);
CREATE INDEX runqueue_run_session_idx ON runqueue_run (tenant, session_id);
CREATE INDEX runqueue_run_session_id_idx ON runqueue_run (session_id);
CREATE INDEX runqueue_run_principal_idx ON runqueue_run (principal);
CREATE INDEX runqueue_run_finished_idx ON runqueue_run (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runqueue_run_failed_idx ON runqueue_run (finished_at) WHERE status = 'failed';
"""  # noqa: S608
    + _DAYS.format(
        column="finished_at",
        source="runqueue_run_before_0009",
        where=f"WHERE status IN ({_TERMINAL})",
        parent="runqueue_run_finished",
    )
    + """
INSERT INTO runqueue_run SELECT * FROM runqueue_run_before_0009;
DROP TABLE runqueue_run_before_0009;
"""
)

RUNS_BACKWARD = f"""
ALTER TABLE runqueue_run RENAME TO runqueue_run_partitioned;
CREATE TABLE runqueue_run (LIKE runqueue_run_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    WITH (fillfactor = 80);
INSERT INTO runqueue_run SELECT * FROM runqueue_run_partitioned;
DROP TABLE runqueue_run_partitioned;
ALTER TABLE runqueue_run ADD CONSTRAINT runqueue_run_pkey PRIMARY KEY (id);
CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run (tenant, session_id)
    WHERE status IN ({_LIVE});
CREATE INDEX runqueue_run_claim_idx ON runqueue_run (priority, created_at) WHERE status = 'queued';
CREATE INDEX runqueue_run_leased_idx ON runqueue_run (status, id)
    WHERE status IN ('running', 'waiting_for_user');
CREATE INDEX runqueue_run_key_idx ON runqueue_run (concurrency_key, status, priority, created_at)
    WHERE concurrency_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX runqueue_run_created_idx ON runqueue_run (created_at, id);
CREATE INDEX runqueue_run_session_idx ON runqueue_run (tenant, session_id);
CREATE INDEX runqueue_run_finished_idx ON runqueue_run (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runqueue_run_failed_idx ON runqueue_run (finished_at) WHERE status = 'failed';
"""  # noqa: S608

_EVENT_TRIGGER = """
CREATE TRIGGER runqueue_event_notify
    AFTER INSERT ON runqueue_run_event
    FOR EACH ROW EXECUTE FUNCTION runqueue_event_notify();
"""

_EVENT_COLUMNS = "id, type, lease_epoch, data, created_at, run_id"

EVENTS_FORWARD = (
    """
ALTER TABLE runqueue_run_event RENAME TO runqueue_run_event_before_0009;
DROP TRIGGER runqueue_event_notify ON runqueue_run_event_before_0009;
ALTER TABLE runqueue_run_event_before_0009 DROP CONSTRAINT runqueue_run_event_pkey;
DROP INDEX runqueue_event_run_idx, runqueue_event_type_idx;
CREATE TEMPORARY TABLE runqueue_0009_event_id ON COMMIT DROP AS
    SELECT coalesce(max(id), 0) AS last FROM runqueue_run_event_before_0009;
ALTER TABLE runqueue_run_event_before_0009 ALTER COLUMN id DROP IDENTITY;

-- Events by day of created_at, with a default. The primary key must hold
-- the partition key.
CREATE TABLE runqueue_run_event (
    id bigint GENERATED BY DEFAULT AS IDENTITY,
    type varchar(64) NOT NULL,
    lease_epoch bigint NOT NULL,
    data jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    run_id uuid NOT NULL,
    CONSTRAINT runqueue_run_event_pkey PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE runqueue_run_event_default PARTITION OF runqueue_run_event DEFAULT;
CREATE INDEX runqueue_event_run_idx ON runqueue_run_event (run_id, id);
CREATE INDEX runqueue_event_type_idx ON runqueue_run_event (type, created_at);
"""  # noqa: S608
    + _DAYS.format(
        column="created_at",
        source="runqueue_run_event_before_0009",
        where="",
        parent="runqueue_run_event",
    )
    + f"""
INSERT INTO runqueue_run_event ({_EVENT_COLUMNS})
    SELECT {_EVENT_COLUMNS} FROM runqueue_run_event_before_0009;
SELECT setval(pg_get_serial_sequence('runqueue_run_event', 'id'),
              (SELECT last FROM runqueue_0009_event_id) + 1, false);
DROP TABLE runqueue_run_event_before_0009;
"""  # noqa: S608
    + _EVENT_TRIGGER
)

EVENTS_BACKWARD = (
    f"""
ALTER TABLE runqueue_run_event RENAME TO runqueue_run_event_partitioned;
CREATE TABLE runqueue_run_event (
    id bigint NOT NULL,
    type varchar(64) NOT NULL,
    lease_epoch bigint NOT NULL,
    data jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    run_id uuid NOT NULL
);
INSERT INTO runqueue_run_event ({_EVENT_COLUMNS})
    SELECT {_EVENT_COLUMNS} FROM runqueue_run_event_partitioned;
CREATE TEMPORARY TABLE runqueue_0009_event_id ON COMMIT DROP AS
    SELECT coalesce(max(id), 0) AS last FROM runqueue_run_event;
DROP TABLE runqueue_run_event_partitioned;
ALTER TABLE runqueue_run_event ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY;
SELECT setval(pg_get_serial_sequence('runqueue_run_event', 'id'),
              (SELECT last FROM runqueue_0009_event_id) + 1, false);
ALTER TABLE runqueue_run_event ADD CONSTRAINT runqueue_run_event_pkey PRIMARY KEY (id);
CREATE INDEX runqueue_event_run_idx ON runqueue_run_event (run_id, id);
CREATE INDEX runqueue_event_type_idx ON runqueue_run_event (type, created_at);
"""  # noqa: S608
    + _EVENT_TRIGGER
)


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0008_worker_cancelled_slots"),
    ]

    operations = [
        migrations.AlterField(
            model_name="checkpoint",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="checkpoints",
                to="runqueue.run",
            ),
        ),
        migrations.AlterField(
            model_name="idempotencykey",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="idempotency_keys",
                to="runqueue.run",
            ),
        ),
        migrations.AlterField(
            model_name="runevent",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="runqueue.run",
            ),
        ),
        migrations.AlterField(
            model_name="scheduletick",
            name="run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="schedule_ticks",
                to="runqueue.run",
            ),
        ),
        migrations.AlterField(
            model_name="toolinvocation",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tool_invocations",
                to="runqueue.run",
            ),
        ),
        # The indexes are made by RUNS_FORWARD, on every partition.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(fields=["session_id"], name="runqueue_run_session_id_idx"),
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(fields=["principal"], name="runqueue_run_principal_idx"),
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        fields=["kind", "created_at"], name="runqueue_run_kind_idx"
                    ),
                ),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        fields=["priority", "created_at"], name="runqueue_run_priority_idx"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(RUNS_FORWARD, RUNS_BACKWARD),
                migrations.RunSQL(EVENTS_FORWARD, EVENTS_BACKWARD),
            ],
        ),
    ]
