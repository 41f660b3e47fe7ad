"""An event's primary key becomes ``(run_id, id, created_at)`` and the
``(run_id, id)`` index goes: every read of events names its run (a run's
timeline, the API's pages, the stream's resume, the default partition's
cleanup) and none finds an event by id alone, so one b-tree per event
serves where two were written: ~65 B of WAL per event, two events per
finished run and one per submitted run (docs/performance.md). The key
still holds the partition key, as a partitioned table's must; an id is
unique by its sequence alone, and Django still knows ``id`` as the key.

Dropped and created on the partitioned parent (its partitions follow), as
0016 and 0022 did: the key is rebuilt here under the table's lock, 6.4 s
for 6,000,000 events on a quiet 2-core machine (docs/performance.md,
"Migration 0023: an event's key is (run_id, id, created_at)").
"""

from django.db import migrations

FORWARD = """
ALTER TABLE runqueue_run_event DROP CONSTRAINT runqueue_run_event_pkey;
DROP INDEX runqueue_event_run_idx;
ALTER TABLE runqueue_run_event
    ADD CONSTRAINT runqueue_run_event_pkey PRIMARY KEY (run_id, id, created_at);
"""

BACKWARD = """
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
