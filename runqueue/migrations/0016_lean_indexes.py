"""Fewer index entries per run (docs/performance.md, "WAL bytes per run"):

- two session indexes (the one-active-run unique index and the console's
  search by session id) hold only runs with a session: a run without one (a
  sub-agent, a batch job) writes no entry in them, at its submit, its claim
  (a new row version) or its finish (a move to a finished day). Every query of them names a session, which implies
  ``session_id IS NOT NULL``, so the planner still uses them. The
  (tenant, session_id) index stays whole: it is the console's tenant filter;
- the finished-time index is a BRIN on the finished days: a day is written
  in ``finished_at`` order, and what reads it by time (the dashboard's
  throughput, finished in the last hour) reads a range. The live partition
  keeps its partial b-tree, which has no entry (no live run has finished),
  so the same read proves it has nothing there without a scan. The dead letter's
  order stays a b-tree (``runqueue_run_failed_idx``, failed runs only);
- the events' (type, created_at) b-tree becomes a BRIN on created_at: the
  only read by type over time is the dashboard's last minutes of claims,
  which a BRIN over the day's newest blocks serves; a run's events are read
  through (run_id, id).

Each index is dropped and created on the partitioned parent (its partitions
follow). A large history rebuilds its session indexes here: on a million
finished runs it takes seconds (docs/performance.md).
"""

from django.db import migrations, models

_ACTIVE = "'queued', 'running', 'waiting_for_user', 'waiting'"

FORWARD = f"""
DROP INDEX runqueue_run_one_active_per_session;
CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run_live (tenant, session_id)
    WHERE session_id IS NOT NULL AND status IN ({_ACTIVE});
DROP INDEX runqueue_run_session_id_idx;
CREATE INDEX runqueue_run_session_id_idx ON runqueue_run (session_id)
    WHERE session_id IS NOT NULL;
DROP INDEX runqueue_run_finished_idx;
CREATE INDEX runqueue_run_finished_idx ON runqueue_run_finished USING brin (finished_at);
CREATE INDEX runqueue_run_live_finished_idx ON runqueue_run_live (finished_at)
    WHERE finished_at IS NOT NULL;
DROP INDEX runqueue_event_type_idx;
CREATE INDEX runqueue_event_created_idx ON runqueue_run_event USING brin (created_at);
"""

BACKWARD = f"""
DROP INDEX runqueue_run_one_active_per_session;
CREATE UNIQUE INDEX runqueue_run_one_active_per_session ON runqueue_run_live (tenant, session_id)
    WHERE status IN ({_ACTIVE});
DROP INDEX runqueue_run_session_id_idx;
CREATE INDEX runqueue_run_session_id_idx ON runqueue_run (session_id);
DROP INDEX runqueue_run_finished_idx, runqueue_run_live_finished_idx;
CREATE INDEX runqueue_run_finished_idx ON runqueue_run (finished_at) WHERE finished_at IS NOT NULL;
DROP INDEX runqueue_event_created_idx;
CREATE INDEX runqueue_event_type_idx ON runqueue_run_event (type, created_at);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0015_deadlines"),
    ]
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="run", name="runqueue_run_one_active_per_session"
                ),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(
                            ("session_id__isnull", False),
                            ("status__in", ("queued", "running", "waiting_for_user", "waiting")),
                        ),
                        fields=("tenant", "session_id"),
                        name="runqueue_run_one_active_per_session",
                    ),
                ),
                migrations.RemoveIndex(model_name="run", name="runqueue_run_session_id_idx"),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(("session_id__isnull", False)),
                        fields=["session_id"],
                        name="runqueue_run_session_id_idx",
                    ),
                ),
                migrations.RemoveIndex(model_name="run", name="runqueue_run_finished_idx"),
                migrations.AddIndex(
                    model_name="run",
                    # A BRIN in the database (FORWARD); plain in the state,
                    # which needs no django.contrib.postgres.
                    index=models.Index(fields=["finished_at"], name="runqueue_run_finished_idx"),
                ),
                migrations.RemoveIndex(model_name="runevent", name="runqueue_event_type_idx"),
                migrations.AddIndex(
                    model_name="runevent",
                    index=models.Index(fields=["created_at"], name="runqueue_event_created_idx"),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
    ]
