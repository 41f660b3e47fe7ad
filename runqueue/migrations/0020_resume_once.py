"""The resume of a waiting run, the active statuses and the live ones
written once in the SQL sources (fragments resume, active_statuses,
live_statuses): runqueue_join and runqueue_recount include the resume and
the active statuses, runqueue_promote the active statuses, so the three are
installed again. They do what 0014's and 0018's did; a resumed parent's
lease columns are cleared as every resume clears them (a waiting run holds
no lease, so they were clear already).

FUNCTIONS is functions.sql's text of the three as it was when written (a
migration is history; see 0006_function_source); PREVIOUS, 0014's and
0018's.
"""

import re
from importlib import import_module

from django.db import migrations

_0014 = import_module("runqueue.migrations.0014_fanin")
_0018 = import_module("runqueue.migrations.0018_busy_sessions")


def _function(text: str, name: str) -> str:
    found = re.search(rf"CREATE OR REPLACE FUNCTION {name}\(.*?\n\$fn\$;", text, re.S)
    return found.group(0)  # type: ignore[union-attr]


PREVIOUS = "\n\n".join(
    (
        _function(_0014.FUNCTIONS, "runqueue_join"),
        _function(_0014.FUNCTIONS, "runqueue_recount"),
        _function(_0018.FUNCTIONS, "runqueue_promote"),
    )
)

FUNCTIONS = r"""
-- The fan-in (docs/decisions.md, "Sub-agents and durable waits"), called by
-- every statement that makes runs with a parent terminal (a finish, a dead
-- letter, a cancel), in that statement, with the parents' ids: one per
-- child, repeats counted. Each parent is locked first, live or dead
-- (lock_parents); then each live parent's children_open goes down, so
-- children ending at once count one after the other; a parent waiting for
-- its children whose count reaches 0 is queued again here (resumed, a new
-- epoch, run.resumed), exactly once: its wait begins only under the same
-- row lock and, if no child is open then, resumes at once instead. A dead
-- letter's count is left alone, but locked: its requeue locks it before it
-- counts again (runqueue_recount), so a child's end is either committed
-- before that count or counted after it, never neither. A parent moved
-- between partitions while this waited for its lock (it finished, or was
-- requeued) fails the statement with 40001, nothing written: the caller
-- runs it again. VOLATILE: each statement inside sees the rows as they are
-- when its locks are held. Returns how many parents resumed; each resume
-- NOTIFYs p_channel so idle workers claim it at once.
CREATE OR REPLACE FUNCTION runqueue_join(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    IF p_parents IS NULL OR cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Every run of p_parents locked, in id order, live or dead-lettered (a dead
    -- letter may be requeued; succeeded and cancelled runs never change): the
    -- live ones first, from the live partition alone, then, only if some were
    -- not there, the dead letters among the others (a probe of every finished
    -- day). A dead letter requeued between the two is live and unlocked here;
    -- the count's UPDATE locks it.
    SELECT array_agg(l.id) INTO held
      FROM (SELECT r.id
              FROM runqueue_run r
             WHERE r.id = ANY(p_parents)
               AND r.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   )
             ORDER BY r.id
               FOR NO KEY UPDATE) AS l;
    IF coalesce(cardinality(held), 0)
       < (SELECT count(DISTINCT p.id) FROM unnest(p_parents) AS p(id) WHERE p.id IS NOT NULL) THEN
        PERFORM 1
           FROM runqueue_run r
          WHERE r.id = ANY(p_parents) AND r.id <> ALL(coalesce(held, '{}'))
            AND r.status = 'failed'
          ORDER BY r.id
            FOR NO KEY UPDATE;
    END IF;
    UPDATE runqueue_run r
       SET children_open = greatest(r.children_open - c.n, 0)
      FROM (SELECT p.id, count(*)::integer AS n
              FROM unnest(p_parents) AS p(id)
             WHERE p.id IS NOT NULL
             GROUP BY p.id) AS c
     WHERE r.id = c.id
       AND r.status IN (
           -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
           'queued', 'running', 'waiting_for_user', 'waiting'
           );
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET input = NULL,
               timed_out = false,
               -- The resume of a waiting run (the end of a SET list, after its input and
               -- timed_out; alias r): queued, due now, a new epoch, a fresh attempt
               -- budget for the new turn, no wait and no lease.
               status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               wait_reason = '',
               wait_name = '',
               waiting_since = NULL,
               wait_until = NULL,
               lease_owner = '',
               lease_token = NULL,
               lease_expires_at = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$fn$;

-- Count the open children of each run in p_parents again, from their
-- statuses (open_children), under its row lock (lock_parents), and resume
-- one that waits for its children and has none open (resume_joined): an
-- operator's requeue calls it, after its own statement, for the requeued
-- run (its children may have ended while it was dead, and their joins left
-- its count alone) and for its parent (the run is open in it again). The
-- count is read in a statement after the lock, so it holds every child
-- transition committed before the lock; one not committed yet (its join
-- waits for this lock) counts in the result after. Terminal runs are left
-- alone. Returns how many resumed.
CREATE OR REPLACE FUNCTION runqueue_recount(p_parents uuid[], p_channel text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    resumed integer;
    held uuid[];
BEGIN
    p_parents := array_remove(p_parents, NULL);
    IF cardinality(p_parents) = 0 THEN
        RETURN 0;
    END IF;
    -- Every run of p_parents locked, in id order, live or dead-lettered (a dead
    -- letter may be requeued; succeeded and cancelled runs never change): the
    -- live ones first, from the live partition alone, then, only if some were
    -- not there, the dead letters among the others (a probe of every finished
    -- day). A dead letter requeued between the two is live and unlocked here;
    -- the count's UPDATE locks it.
    SELECT array_agg(l.id) INTO held
      FROM (SELECT r.id
              FROM runqueue_run r
             WHERE r.id = ANY(p_parents)
               AND r.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   )
             ORDER BY r.id
               FOR NO KEY UPDATE) AS l;
    IF coalesce(cardinality(held), 0)
       < (SELECT count(DISTINCT p.id) FROM unnest(p_parents) AS p(id) WHERE p.id IS NOT NULL) THEN
        PERFORM 1
           FROM runqueue_run r
          WHERE r.id = ANY(p_parents) AND r.id <> ALL(coalesce(held, '{}'))
            AND r.status = 'failed'
          ORDER BY r.id
            FOR NO KEY UPDATE;
    END IF;
    UPDATE runqueue_run r
       SET children_open =
           -- How many children of run r are open: the live partition's parent index.
           (SELECT count(*)::integer
              FROM runqueue_run c
             WHERE c.parent_id = r.id
               AND c.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   ))
     WHERE r.id = ANY(p_parents)
       AND r.status IN (
           -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
           'queued', 'running', 'waiting_for_user', 'waiting'
           );
    -- Each run of p_parents that waits for its children and has none open is
    -- queued again (resumed, a new epoch, run.resumed, a NOTIFY); how many.
    WITH woken AS (
        UPDATE runqueue_run r
           SET input = NULL,
               timed_out = false,
               -- The resume of a waiting run (the end of a SET list, after its input and
               -- timed_out; alias r): queued, due now, a new epoch, a fresh attempt
               -- budget for the new turn, no wait and no lease.
               status = 'queued',
               lease_epoch = r.lease_epoch + 1,
               attempts = 0,
               scheduled_for = now(),
               wait_reason = '',
               wait_name = '',
               waiting_since = NULL,
               wait_until = NULL,
               lease_owner = '',
               lease_token = NULL,
               lease_expires_at = NULL
         WHERE r.id = ANY(p_parents)
           AND r.status = 'waiting' AND r.wait_reason = 'children' AND r.children_open = 0
        RETURNING r.id, r.lease_epoch
    ), logged AS (
        INSERT INTO runqueue_run_event (run_id, type, lease_epoch, data, created_at)
        SELECT w.id, 'run.resumed', w.lease_epoch, '{"reason": "children"}'::jsonb, now()
          FROM woken w
    )
    SELECT count(pg_notify(p_channel, '')) INTO resumed FROM woken;
    RETURN resumed;
END;
$fn$;

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
               AND a.status IN (
                   -- Active: a session's one active run, a child open (models.ACTIVE_STATUSES).
                   'queued', 'running', 'waiting_for_user', 'waiting'
                   ));
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


class Migration(migrations.Migration):
    dependencies = [("runqueue", "0019_versions")]

    operations = [migrations.RunSQL(FUNCTIONS, reverse_sql=PREVIOUS)]
