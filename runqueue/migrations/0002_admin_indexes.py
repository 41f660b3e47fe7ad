"""Indexes for the admin console's lists at a million runs.

Built CONCURRENTLY (a non-atomic migration), so adding them to a live queue
does not block submits or claims.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runqueue", "0001_initial")]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(fields=["created_at", "id"], name="runqueue_run_created_idx"),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "failed")),
                fields=["finished_at"],
                name="runqueue_run_failed_idx",
            ),
        ),
    ]
