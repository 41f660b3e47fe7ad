"""The live partition leaves half of each page free (fillfactor 50, from 80):
a claim's new row version is ~45 % longer than the queued one it replaces
(the lease's owner, token and times), so with 80 43 % of the claims of a
packed backlog found no room on their page and went to another, which
costs a second lock record and a whole new tuple in the WAL instead of the
changed bytes; and a heartbeat of a run whose page is full is not a HOT
update (a new entry in each of the partition's indexes). With 50: ~30 B
less WAL per drained run, and 95 % of heartbeats HOT where 77 % were
(docs/performance.md, "A claim and a heartbeat on their own page").

A storage parameter, set under a SHARE UPDATE EXCLUSIVE lock: no row is
read or moved, and submits, claims and finishes go on meanwhile. Pages
written from now on are filled to half; a backlog already queued keeps its
pages as they are and is left as it drains.
"""

from django.db import migrations

FORWARD = "ALTER TABLE runqueue_run_live SET (fillfactor = 50)"
BACKWARD = "ALTER TABLE runqueue_run_live SET (fillfactor = 80)"


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0025_claim_plan_without_statistics"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
