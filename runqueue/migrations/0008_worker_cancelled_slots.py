"""Worker.cancelled_slots: the admin's worker page shows slots held by a
handler that was told to stop and has not returned."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runqueue", "0007_schedule_overlap")]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="cancelled_slots",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
