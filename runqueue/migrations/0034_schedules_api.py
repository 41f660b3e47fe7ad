"""Schedules over the API and from handlers (``/api/schedules/``,
``ctx.schedule``): a one-shot time beside the cron (exactly one of them), a
session the runs are turns of and their on_busy, whether the runs may make
schedules themselves, and who made the schedule (the token whose limit
counts it). Every new column is NULL or has a constant default: adding
them rewrites no row. A tick a busy session refused is recorded ``busy``.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0033_pause_run"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="created_by",
            field=models.CharField(blank=True, default="", editable=False, max_length=255),
        ),
        migrations.AddField(
            model_name="schedule",
            name="on_busy",
            field=models.CharField(blank=True, editable=False, max_length=16, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="run_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="runs_may_schedule",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="schedule",
            name="session_id",
            field=models.CharField(blank=True, editable=False, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="token",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="schedules",
                to="runqueue.apitoken",
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="cron",
            field=models.CharField(
                blank=True,
                help_text="Five fields: minute hour day month weekday (empty for a one-shot).",
                max_length=255,
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="source",
            field=models.CharField(
                choices=[
                    ("settings", "RUNQUEUE['SCHEDULES']"),
                    ("admin", "Admin"),
                    ("api", "HTTP API"),
                    ("handler", "Handler (ctx.schedule)"),
                ],
                default="admin",
                editable=False,
                max_length=10,
            ),
        ),
        migrations.AlterField(
            model_name="scheduletick",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("fired", "Fired"),
                    ("skipped", "Skipped"),
                    ("overlapped", "Skipped: the last run was still active"),
                    ("run_now", "Run now"),
                    ("busy", "Skipped: the session was busy"),
                ],
                max_length=10,
            ),
        ),
        migrations.AddConstraint(
            model_name="schedule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("run_at__isnull", True), models.Q(("cron", ""), _negated=True)),
                    models.Q(("run_at__isnull", False), ("cron", "")),
                    _connector="OR",
                ),
                name="runqueue_schedule_cron_or_run_at",
            ),
        ),
    ]
