"""Forks and usage (docs/decisions.md, "Forking a run", "Usage and cost"):
``Run.forked_from`` with its index on every partition and the permission
``fork_run``; the usage table (a model call per row, unique per run, lease
epoch and call) and a run tree's totals and spend cap (``TreeSpend``, keyed
by the root run). No function changes: the claim is untouched.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0016_lean_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="TreeSpend",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="tree_spend",
                        serialize=False,
                        to="runqueue.run",
                    ),
                ),
                (
                    "spend_cap",
                    models.DecimalField(blank=True, decimal_places=12, max_digits=24, null=True),
                ),
                ("cost", models.DecimalField(decimal_places=12, default=0, max_digits=24)),
                ("input_tokens", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("calls", models.BigIntegerField(default=0)),
                ("unpriced_calls", models.BigIntegerField(default=0)),
                ("capped_at", models.DateTimeField(blank=True, null=True)),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={
                "db_table": "runqueue_tree_spend",
            },
        ),
        migrations.CreateModel(
            name="Usage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("root_id", models.UUIDField()),
                ("tenant", models.CharField(max_length=255)),
                ("session_id", models.CharField(blank=True, max_length=255, null=True)),
                ("kind", models.CharField(max_length=255)),
                ("lease_epoch", models.BigIntegerField()),
                ("call", models.IntegerField()),
                ("attempt", models.IntegerField()),
                ("model", models.CharField(max_length=255)),
                ("input_tokens", models.BigIntegerField()),
                ("output_tokens", models.BigIntegerField()),
                ("cost", models.DecimalField(decimal_places=12, max_digits=24, null=True)),
                ("fenced", models.BooleanField(default=False)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={
                "db_table": "runqueue_usage",
                "ordering": ["id"],
            },
        ),
        migrations.AlterModelOptions(
            name="run",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    ("requeue_run", "Can requeue a dead-lettered run"),
                    ("cancel_run", "Can cancel a run"),
                    ("resolve_uncertain", "Can resolve an uncertain tool invocation"),
                    ("fork_run", "Can fork a finished run from one of its steps"),
                ],
            },
        ),
        migrations.AddField(
            model_name="run",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="forks",
                to="runqueue.run",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("forked_from__isnull", False)),
                fields=["forked_from"],
                name="runqueue_run_forked_from_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="treespend",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("spend_cap__isnull", True), ("spend_cap__gt", 0), _connector="OR"
                ),
                name="runqueue_tree_spend_cap_gt_0",
            ),
        ),
        migrations.AddField(
            model_name="usage",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="usage",
                to="runqueue.run",
            ),
        ),
        migrations.AddIndex(
            model_name="usage",
            index=models.Index(fields=["root_id"], name="runqueue_usage_root_idx"),
        ),
        migrations.AddIndex(
            model_name="usage",
            index=models.Index(fields=["tenant", "session_id"], name="runqueue_usage_session_idx"),
        ),
        migrations.AddIndex(
            model_name="usage",
            index=models.Index(fields=["tenant", "created_at"], name="runqueue_usage_tenant_idx"),
        ),
        migrations.AddConstraint(
            model_name="usage",
            constraint=models.UniqueConstraint(
                fields=("run", "lease_epoch", "call"), name="runqueue_usage_once"
            ),
        ),
        migrations.AddConstraint(
            model_name="usage",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("call__gte", 0), ("input_tokens__gte", 0), ("output_tokens__gte", 0)
                ),
                name="runqueue_usage_counts_gte_0",
            ),
        ),
        migrations.AddConstraint(
            model_name="usage",
            constraint=models.CheckConstraint(
                condition=models.Q(("cost__isnull", True), ("cost__gte", 0), _connector="OR"),
                name="runqueue_usage_cost_gte_0",
            ),
        ),
    ]
