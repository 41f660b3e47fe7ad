"""The search by principal reads an index of the runs that have one: a run
submitted without a principal (a sub-agent, a batch job, a Python submit)
writes no entry in it at its submit, its claim (a new row version) or its
finish (a move to a finished day): ~200 B of WAL per such run
(docs/performance.md). A search names a principal, which implies
``principal <> ''``, so the planner still uses it.

Dropped and created on the partitioned parent (its partitions follow), as
0016 did: a large history rebuilds it here, in seconds per million runs.
"""

from django.db import migrations, models

FORWARD = """
DROP INDEX runqueue_run_principal_idx;
CREATE INDEX runqueue_run_principal_idx ON runqueue_run (principal) WHERE principal <> '';
"""

BACKWARD = """
DROP INDEX runqueue_run_principal_idx;
CREATE INDEX runqueue_run_principal_idx ON runqueue_run (principal);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0021_tree_root_without_jit"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="runqueue_run_principal_idx"),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=~models.Q(principal=""),
                        fields=["principal"],
                        name="runqueue_run_principal_idx",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
