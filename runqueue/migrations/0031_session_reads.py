"""A session's turns newest first (``runqueue.session``, ``GET
/api/sessions/<id>/``, the session stream): an index of the runs that have
a session by (tenant, session, submit time, id), so the newest page of a
years-long session is a backward walk of a few entries per partition, not
a sort of every run it ever had. ``runqueue_run_session_idx`` (tenant,
session) keeps serving the console's tenant filter, which reads runs
without a session too; runs without one write no entry here.

Created on the partitioned parent (its partitions follow), as 0016 did.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0030_inbound_events"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("session_id__isnull", False)),
                fields=["tenant", "session_id", "created_at", "id"],
                name="runqueue_run_session_turns_idx",
            ),
        ),
    ]
