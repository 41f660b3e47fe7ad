"""Busy sessions (docs/decisions.md, "Busy sessions: on_busy"): the status
``pending`` of a turn that waits in line behind its session's active run,
its ``place`` in that line, the run a turn ``interrupted``, and
runqueue_promote, which every terminal statement calls to queue a
session's next turn.

``pending`` joins the live partition's list (detached and attached again
with the new list, as 0012 did for ``waiting``); the line's unique index
(``runqueue_run_pending_place``, which the promotion reads) is on the live
partition alone, as the session's active-run index is. Pending turns have
start deadlines too, so the start deadline index covers them.

FUNCTIONS is functions.sql's runqueue_promote as it was when written (a
migration is history; see 0006_function_source).
"""

import django.db.models.deletion
from django.db import migrations, models

_OLD_LIVE = "'queued', 'running', 'waiting_for_user', 'waiting'"
_LIVE = "'queued', 'running', 'waiting_for_user', 'waiting', 'pending'"

LIVE_FORWARD = f"""
ALTER TABLE runqueue_run DETACH PARTITION runqueue_run_live;
ALTER TABLE runqueue_run ATTACH PARTITION runqueue_run_live FOR VALUES IN ({_LIVE});
CREATE UNIQUE INDEX runqueue_run_pending_place ON runqueue_run_live (tenant, session_id, place)
    WHERE status = 'pending';
DROP INDEX runqueue_run_start_by_idx;
CREATE INDEX runqueue_run_start_by_idx ON runqueue_run_live (start_by)
    WHERE status IN ('queued', 'pending') AND start_by IS NOT NULL;
"""

LIVE_BACKWARD = f"""
DROP INDEX runqueue_run_start_by_idx;
CREATE INDEX runqueue_run_start_by_idx ON runqueue_run_live (start_by)
    WHERE status = 'queued' AND start_by IS NOT NULL;
DROP INDEX runqueue_run_pending_place;
ALTER TABLE runqueue_run DETACH PARTITION runqueue_run_live;
ALTER TABLE runqueue_run ATTACH PARTITION runqueue_run_live FOR VALUES IN ({_OLD_LIVE});
"""

FUNCTIONS = r"""
-- A session's next turn (docs/decisions.md, "Busy sessions: on_busy"),
-- called by every statement that makes runs terminal (a finish, a dead
-- letter, a cancel, an expiry), in that statement, with the tenants and
-- session ids of the runs it ended (NULL session ids are skipped). For each
-- session, in (tenant, session) order: if no run of it is active any more
-- (this statement's own changes are seen: a VOLATILE function's statements
-- read after the caller's), its first pending turn (the lowest place) is
-- queued: due now or at its scheduled time, run.promoted, a NOTIFY (its
-- epoch stays: a pending turn never had a lease to fence). Exactly one, and
-- only when the session has no active run: every write that adds a pending
-- turn holds the active run's row lock (submit's routing), and the
-- statement that ends that run holds it too, so a turn committed before
-- the end is seen here, and one added after finds the promoted run active
-- and lines up behind it. A turn another transaction holds (a cancel of
-- it, the deadline service expiring it) is stepped over (SKIP LOCKED): it
-- is ending, and the next is queued instead. Ending a pending turn calls
-- this too and changes nothing while the session has an active run.
-- Returns how many turns were queued.
CREATE OR REPLACE FUNCTION runqueue_promote(
    p_tenants text[], p_sessions text[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    s record;
    next_id uuid;
    promoted integer := 0;
BEGIN
    IF p_sessions IS NULL OR cardinality(p_sessions) = 0 THEN
        RETURN 0;
    END IF;
    FOR s IN
        SELECT DISTINCT t.tenant, t.session_id
          FROM unnest(p_tenants, p_sessions) AS t(tenant, session_id)
         WHERE t.session_id IS NOT NULL
         ORDER BY t.tenant, t.session_id
    LOOP
        -- Through runqueue_run_one_active_per_session: the session's line
        -- waits while it has an active run.
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM runqueue_run a
             WHERE a.tenant = s.tenant AND a.session_id = s.session_id
               AND a.status IN ('queued', 'running', 'waiting_for_user', 'waiting'));
        -- Through runqueue_run_pending_place, in line order.
        SELECT p.id INTO next_id
          FROM runqueue_run p
         WHERE p.tenant = s.tenant AND p.session_id = s.session_id AND p.status = 'pending'
         ORDER BY p.place
         LIMIT 1
           FOR NO KEY UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        WITH queued AS (
            UPDATE runqueue_run r
               SET status = 'queued',
                   scheduled_for = greatest(coalesce(r.scheduled_for, now()), now())
             WHERE r.id = next_id AND r.status = 'pending'
            RETURNING r.id, r.lease_epoch, r.place
        )
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT q.id, 'run.promoted', q.lease_epoch, jsonb_build_object('place', q.place), now()
          FROM queued q;
        IF FOUND THEN
            PERFORM pg_notify(p_channel, '');
            promoted := promoted + 1;
        END IF;
    END LOOP;
    RETURN promoted;
END;
$fn$;
"""

_ACTIVE = ("queued", "running", "waiting_for_user", "waiting")
_LIVE_STATUSES = (*_ACTIVE, "pending")
_TERMINAL = ["succeeded", "failed", "cancelled"]


class Migration(migrations.Migration):
    dependencies = [
        ("runqueue", "0017_fork_usage"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="interrupted",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="interrupted_by",
                to="runqueue.run",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="place",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="idempotencykey",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("created", "Run created"),
                    ("input_delivered", "Input delivered"),
                    ("enqueued", "Run created, pending behind the session's active run"),
                    ("merged", "Payload merged into a turn not started yet"),
                    ("interrupted", "Run created, the session's active run interrupted"),
                    ("rolled_back", "Run created, the session's active run rolled back"),
                ],
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("waiting_for_user", "Waiting for user"),
                    ("waiting", "Waiting"),
                    ("pending", "Pending (behind its session's active run)"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed (dead-lettered)"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=20,
            ),
        ),
        migrations.RemoveConstraint(model_name="run", name="runqueue_run_status_valid"),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", [*_LIVE_STATUSES, *_TERMINAL])),
                name="runqueue_run_status_valid",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="run", name="runqueue_run_terminal_has_finished_at"
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", _LIVE_STATUSES), ("finished_at__isnull", False), _connector="OR"
                ),
                name="runqueue_run_terminal_has_finished_at",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "pending"), _negated=True),
                    models.Q(("place__isnull", False), ("session_id__isnull", False)),
                    _connector="OR",
                ),
                name="runqueue_run_pending_in_line",
            ),
        ),
        # The live partition's: its bound, the line's index, the start
        # deadline index over pending turns too.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="runqueue_run_start_by_idx"),
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(
                            ("start_by__isnull", False), ("status__in", ("queued", "pending"))
                        ),
                        fields=["start_by"],
                        name="runqueue_run_start_by_idx",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("status", "pending")),
                        fields=("tenant", "session_id", "place"),
                        name="runqueue_run_pending_place",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(LIVE_FORWARD, LIVE_BACKWARD)],
        ),
        migrations.RunSQL(
            FUNCTIONS, reverse_sql="DROP FUNCTION runqueue_promote(text[], text[], text)"
        ),
    ]
