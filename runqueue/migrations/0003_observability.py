# Issue 15: the run's traceparent, and the event stream's wake-up.

from django.db import migrations, models

# One NOTIFY per appended event of a watched run, on the channel
# runqueue_events with the run id as payload; nothing for the others. A
# trigger, so no insert path (the ORM's events.append, the claim, finish and
# sweep statements, anything added later) can forget it. decisions.md,
# "Event stream", has the reasons and the cost.
STREAM_TRIGGER = """
CREATE FUNCTION runqueue_event_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = NEW.run_id) THEN
        PERFORM pg_notify('runqueue_events', NEW.run_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER runqueue_event_notify
    AFTER INSERT ON runqueue_run_event
    FOR EACH ROW EXECUTE FUNCTION runqueue_event_notify();
"""

DROP_STREAM_TRIGGER = """
DROP TRIGGER IF EXISTS runqueue_event_notify ON runqueue_run_event;
DROP FUNCTION IF EXISTS runqueue_event_notify();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0002_scheduled_work"),
    ]

    operations = [
        migrations.CreateModel(
            name="StreamWatch",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "watcher",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("run_id", models.UUIDField()),
                ("watcher", models.CharField(max_length=255)),
                ("expires_at", models.DateTimeField()),
            ],
            options={
                "db_table": "runqueue_stream_watch",
            },
        ),
        # Lost on a crash restart, which also ends every stream watching.
        migrations.RunSQL(
            "ALTER TABLE runqueue_stream_watch SET UNLOGGED",
            reverse_sql="ALTER TABLE runqueue_stream_watch SET LOGGED",
        ),
        migrations.RunSQL(STREAM_TRIGGER, reverse_sql=DROP_STREAM_TRIGGER),
        migrations.AddField(
            model_name="run",
            name="traceparent",
            field=models.CharField(blank=True, db_default="", default="", max_length=55),
        ),
    ]
