"""The tenant index in the lists' order: ``(tenant, created_at, id)``
instead of ``(tenant, session_id)``. The console's tenant filter (newest
first, a page at a time) walks it on every partition and stops at the page;
before, the live partition was read backwards by creation until the tenant
was found, all of it for a tenant with no live run (200,000 rows at ten
million runs). A session's runs are found through
``runqueue_run_session_turns_idx`` (tenant, session_id, created_at, id),
which a lookup by session id (never NULL) can use; the tenants' skip scan
needs only the leading tenant.

Dropped and created on the partitioned parent (its partitions follow), as
0016 and 0022 did: a large history rebuilds it here, in seconds per million
runs.
"""

from django.db import migrations, models

FORWARD = """
DROP INDEX runqueue_run_session_idx;
CREATE INDEX runqueue_run_tenant_idx ON runqueue_run (tenant, created_at, id);
"""

BACKWARD = """
DROP INDEX runqueue_run_tenant_idx;
CREATE INDEX runqueue_run_session_idx ON runqueue_run (tenant, session_id);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0035_leased_by_claim"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="runqueue_run_session_idx"),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        fields=["tenant", "created_at", "id"], name="runqueue_run_tenant_idx"
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
