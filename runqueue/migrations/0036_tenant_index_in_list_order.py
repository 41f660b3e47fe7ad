"""The tenant index in the lists' order: ``(tenant, created_at)`` instead
of ``(tenant, session_id)``. The console's tenant filter (newest
first, a page at a time) walks it on every partition and stops at the page;
before, the live partition was read backwards by creation until the tenant
was found, all of it for a tenant with no live run (200,000 rows at ten
million runs). A session's runs are found through
``runqueue_run_session_turns_idx`` (tenant, session_id, created_at, id),
which a lookup by session id (never NULL) can use; the tenants' skip scan
needs only the leading tenant. An entry is no larger: a run without a
session gave the old one a NULL, and its null bitmap took the place the
timestamp takes now (24 bytes either way); one with a session, smaller.
The id's tie-break is an incremental sort of the page (no id column: 16
bytes more per entry, three entries a run).

Dropped and created on the partitioned parent (its partitions follow), as
0016 and 0022 did: a large history rebuilds it here, in seconds per million
runs.
"""

from django.db import migrations, models

FORWARD = """
DROP INDEX runqueue_run_session_idx;
CREATE INDEX runqueue_run_tenant_idx ON runqueue_run (tenant, created_at);
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
                        fields=["tenant", "created_at"], name="runqueue_run_tenant_idx"
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
