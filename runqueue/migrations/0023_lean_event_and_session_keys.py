"""Two index entries fewer per run, where nothing reads them.

An event's primary key becomes ``(run_id, id, created_at)`` and the
``(run_id, id)`` index goes: every read of events names its run
(a run's timeline, the API's pages, the stream's resume, the default
partition's cleanup), and none finds an event by id alone. One b-tree
per event instead of two: ~70 B of WAL per event, two events per
finished run and one per submitted run (docs/performance.md). The key
still holds the partition key, as a partitioned table's must, and still
makes each row unique (an id is unique by its sequence alone).

The ``(tenant, session_id)`` index leaves the live partition (the
finished days keep it), as the kind and class indexes did in 0009: there
every submit and every claim wrote an entry for it, while a session's
live runs are found by the session id index (runs with a session only)
and the console's tenant filter over the live partition reads the
backlog itself. The tenant choices (``admin_tenants``) skip-scan the
finished days and take the live partition's tenants in one pass.

Dropped and created on the partitioned parents (their partitions
follow), as 0016 and 0022 did: a large history rebuilds the event key
here, under the table's lock, in seconds per million events
(docs/performance.md, "Migration 0023 at scale").
"""

from django.db import migrations, models

FORWARD = """
ALTER TABLE runqueue_run_event DROP CONSTRAINT runqueue_run_event_pkey;
DROP INDEX runqueue_event_run_idx;
ALTER TABLE runqueue_run_event
    ADD CONSTRAINT runqueue_run_event_pkey PRIMARY KEY (run_id, id, created_at);
DROP INDEX runqueue_run_session_idx;
CREATE INDEX runqueue_run_session_idx ON runqueue_run_finished (tenant, session_id);
"""

BACKWARD = """
DROP INDEX runqueue_run_session_idx;
CREATE INDEX runqueue_run_session_idx ON runqueue_run (tenant, session_id);
ALTER TABLE runqueue_run_event DROP CONSTRAINT runqueue_run_event_pkey;
ALTER TABLE runqueue_run_event ADD CONSTRAINT runqueue_run_event_pkey PRIMARY KEY (id, created_at);
CREATE INDEX runqueue_event_run_idx ON runqueue_run_event (run_id, id);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0022_principal_index_partial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="runevent", name="runqueue_event_run_idx"),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
