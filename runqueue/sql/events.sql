-- Inbound events: recorded once, matched to triggers and waits, pruned.

-- fragment: event_input --
-- The input (ctx.input) of a run an inbound event wakes, from the event's row (alias e): one
-- shape for a wait that finds the event and an event that finds the wait.
jsonb_build_object('name', e.name, 'key', e.key, 'data', e.data,
                   'received_at', e.received_at)

-- name: event_name_shared --
-- An inbound event's first statement: the (tenant, name) lock, shared, so events of a name are
-- recorded side by side but never while a wait for it is written (event_name_exclusive).
-- Why: docs/decisions/schedules-webhooks.md, "Inbound events".
SELECT pg_advisory_xact_lock_shared(
           hashtextextended('runqueue.event:' || %(tenant)s || ':' || %(name)s, 0));

-- name: event_name_exclusive --
-- A wait for an inbound event takes its (tenant, name) lock exclusively, after its fence and
-- before suspend: events in flight commit first and suspend sees them; later ones wait for the
-- wait to commit and find the run waiting.
SELECT pg_advisory_xact_lock(
           hashtextextended('runqueue.event:' || %(tenant)s || ':' || %(name)s, 0));

-- name: record_event --
-- An inbound event's row, once per (tenant, name, key): no row when the key
-- is known already (a repeated delivery; the caller reads the first).
INSERT INTO runqueue_inbound_event (tenant, name, key, data, principal, started, received_at)
VALUES (%(tenant)s, %(name)s, %(key)s, %(data)s::jsonb, %(principal)s, '[]'::jsonb,
        statement_timestamp())
ON CONFLICT (tenant, name, key) DO NOTHING
RETURNING id, received_at;

-- name: event_triggers --
-- The admin's triggers an event fires: its name, enabled, for its tenant or
-- every tenant, whose match its data contains (jsonb @>).
SELECT t.id, t.kind, t.priority
  FROM runqueue_event_trigger t
 WHERE t.name = %(name)s AND t.enabled AND t.tenant IN ('', %(tenant)s)
   AND %(data)s::jsonb @> t.match
 ORDER BY t.id;

-- name: matching --
-- Which of a list of matches (a JSON array) an event's data contains, by
-- position from 0: code triggers are matched by PostgreSQL's @> too, so a
-- match means the same in code, in the admin and in a wait.
SELECT (m.i - 1)::integer
  FROM jsonb_array_elements(%(matches)s::jsonb) WITH ORDINALITY AS m(match, i)
 WHERE %(data)s::jsonb @> m.match
 ORDER BY m.i;

-- name: deliver_event --
-- An inbound event ends the waits it matches: each run locked in id order (two events never
-- deadlock), re-checked on its latest version, queued again with the event as its input and
-- the event recorded as taken. The caller holds the name's lock shared.
WITH waiting AS (
    SELECT r.id
      FROM runqueue_run r
     WHERE r.tenant = %(tenant)s AND r.status = 'waiting' AND r.wait_reason = 'event'
       AND r.wait_name = %(name)s AND %(data)s::jsonb @> r.wait_match
     ORDER BY r.id
       FOR NO KEY UPDATE
), woken AS (
    UPDATE runqueue_run r
       SET input = (SELECT
                        -- include: event_input --
                      FROM runqueue_inbound_event e WHERE e.id = %(event_id)s),
           timed_out = false,
           -- include: resume --
      FROM waiting w
     WHERE r.id = w.id AND r.status = 'waiting' AND r.wait_reason = 'event'
       AND r.wait_name = %(name)s
    RETURNING r.id, r.lease_epoch, r.priority
), taken AS (
    INSERT INTO runqueue_event_delivery (run_id, event_id, delivered_at)
    SELECT w.id, %(event_id)s, now() FROM woken w
)
SELECT w.id, w.lease_epoch, w.priority FROM woken w ORDER BY w.id;

-- name: set_event_started --
-- The runs an event's triggers started, on its row (same transaction).
UPDATE runqueue_inbound_event SET started = %(started)s::jsonb WHERE id = %(event_id)s;

-- name: prune_events --
-- Retention: up to %(limit)s inbound events received more than
-- %(retention)s seconds ago, oldest first, with the record of which runs
-- took them. An event being written now is stepped over.
WITH old AS (
    SELECT id
      FROM runqueue_inbound_event
     WHERE received_at < now() - make_interval(secs => %(retention)s::float8)
     ORDER BY received_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), taken AS (
    DELETE FROM runqueue_event_delivery d USING old o WHERE d.event_id = o.id
)
DELETE FROM runqueue_inbound_event e USING old o WHERE e.id = o.id
RETURNING e.id;
