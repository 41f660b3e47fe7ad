"""Tool calls that wait for a person's approval (``ctx.invoke_tool(approval=)``,
``runqueue.decide_tool``): the record's ``approval`` (what was asked, and the
decision with who and when), three statuses (awaiting approval, approved,
rejected), a partial index for the console's pending approvals, and the
permission to decide. A nullable column and an index of the few awaiting
rows: no row is rewritten.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0026_live_fillfactor"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="run",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    ("requeue_run", "Can requeue a dead-lettered run"),
                    ("cancel_run", "Can cancel a run"),
                    ("resolve_uncertain", "Can resolve an uncertain tool invocation"),
                    ("fork_run", "Can fork a finished run from one of its steps"),
                    (
                        "decide_tool",
                        "Can approve, reject, edit or answer a tool call awaiting approval",
                    ),
                ],
            },
        ),
        migrations.AddField(
            model_name="toolinvocation",
            name="approval",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="toolinvocation",
            name="status",
            field=models.CharField(
                choices=[
                    ("started", "Started"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("uncertain", "Uncertain"),
                    ("awaiting_approval", "Awaiting approval"),
                    ("approved", "Approved"),
                    ("rejected", "Rejected"),
                ],
                default="started",
                max_length=20,
            ),
        ),
        migrations.AddIndex(
            model_name="toolinvocation",
            index=models.Index(
                condition=models.Q(("status", "awaiting_approval")),
                fields=["created_at"],
                name="runqueue_tool_awaiting_idx",
            ),
        ),
    ]
