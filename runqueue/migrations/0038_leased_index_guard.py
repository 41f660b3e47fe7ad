"""The leased index's predicate also says ``lease_owner IS NOT NULL`` (always
true: the column is NOT NULL), so that a finish's or a fence's ``status =
'running'`` no longer implies it. With statistics taken while the runs were
queued (nothing running), PostgreSQL 15 planned each finish of
``finish_and_claim`` as a walk of the index's running range with the ids as a
filter: every running run read per finish. Now they go by id (the primary
key). The reads of the range (the sweeper, the dashboard, the metrics) say
``lease_owner >= ''`` (always true), which implies the guard on every version
(PostgreSQL 17 drops a query's own IS NOT NULL on a NOT NULL column). The
concurrency key index has had the same guard since 0004.

Dropped and made on the live partition, where it lives (0009, 0035): the live
partition holds live runs only (at ten million runs, 200,000 live: `migrate`
of this migration 2.1 s of wall time, Django's start-up included).
"""

from django.db import migrations, models

FORWARD = """
DROP INDEX runqueue_run_leased_idx;
CREATE INDEX runqueue_run_leased_idx ON runqueue_run_live (status, claimed_at, id)
    WHERE status IN ('running', 'waiting_for_user') AND lease_owner IS NOT NULL;
"""

BACKWARD = """
DROP INDEX runqueue_run_leased_idx;
CREATE INDEX runqueue_run_leased_idx ON runqueue_run_live (status, claimed_at, id)
    WHERE status IN ('running', 'waiting_for_user');
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0037_claims_written_by_their_statements"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="runqueue_run_leased_idx"),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(
                            status__in=["running", "waiting_for_user"], lease_owner__isnull=False
                        ),
                        fields=["status", "claimed_at", "id"],
                        name="runqueue_run_leased_idx",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
