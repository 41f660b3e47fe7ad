"""The queue records how it routed a turn in the run's own column, ``turn``
(``runqueue.turns``): the messages a merge joined, whether a pending turn
is a steer. Until now a merge rewrote the payload to ``{"merged": [...]}``,
and a handler read any payload of that shape as a merge, a client's own
included. A nullable column: no row is rewritten to add it.

Live runs merged the old way (their log has ``run.merged``, so the shape
is the queue's, not a client's) are moved to the new one: the first
message is the payload again, every message in ``turn``. Finished runs
keep their history as it was.
"""

from django.db import migrations, models

FORWARD = """
UPDATE runqueue_run r
   SET turn = jsonb_build_object('payloads', r.payload -> 'merged'),
       payload = r.payload -> 'merged' -> 0
 WHERE r.status IN ('queued', 'pending', 'running', 'waiting', 'waiting_for_user')
   AND jsonb_typeof(r.payload -> 'merged') = 'array'
   AND EXISTS (SELECT 1 FROM runqueue_run_event e
                WHERE e.run_id = r.id AND e.type = 'run.merged')
"""

BACKWARD = """
UPDATE runqueue_run r
   SET payload = jsonb_build_object('merged', r.turn -> 'payloads'),
       turn = NULL
 WHERE r.status IN ('queued', 'pending', 'running', 'waiting', 'waiting_for_user') AND jsonb_typeof(r.turn -> 'payloads') = 'array'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0027_tool_approvals"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="turn",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
        # A key may remember a steer (on_busy="steer"): choices only, no DDL.
        migrations.AlterField(
            model_name="idempotencykey",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("created", "Run created"),
                    ("input_delivered", "Input delivered"),
                    ("enqueued", "Run created, pending behind the session's active run"),
                    ("merged", "Payload merged into a turn not started yet"),
                    ("interrupted", "Run created, the session's active run interrupted"),
                    ("rolled_back", "Run created, the session's active run rolled back"),
                    ("steered", "Pending turn the running turn may read as a steer"),
                ],
                max_length=20,
            ),
        ),
    ]
