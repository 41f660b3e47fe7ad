"""The leased index in claim order: ``(status, claimed_at, id)``. The
dashboard's claim latency (the hour's claims still running) and its slot
holders (longest held first) read a range of it instead of every running
run; a run waiting for its user holds no claim (NULL), so that status is
still in id order, a fair sample for the capped metrics.

Dropped and created on the live partition, where it lives (0009); the live
partition holds live runs only, so this is quick.
"""

from django.db import migrations, models

FORWARD = """
DROP INDEX runqueue_run_leased_idx;
CREATE INDEX runqueue_run_leased_idx ON runqueue_run_live (status, claimed_at, id)
    WHERE status IN ('running', 'waiting_for_user');
"""

BACKWARD = """
DROP INDEX runqueue_run_leased_idx;
CREATE INDEX runqueue_run_leased_idx ON runqueue_run_live (status, id)
    WHERE status IN ('running', 'waiting_for_user');
"""

LEASED = models.Q(status__in=["running", "waiting_for_user"])


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0034_schedules_api"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="runqueue_run_leased_idx"),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=LEASED,
                        fields=["status", "claimed_at", "id"],
                        name="runqueue_run_leased_idx",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
