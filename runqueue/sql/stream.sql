-- The live stream: the NOTIFYs of watched runs, ctx.stream's text, and the
-- watch rows of web processes.

-- fragment: watched --
-- The NOTIFY of each watched run in the CTE grown (claims, successes: no event row for the
-- trigger), once, in the last SELECT (docs/decisions/history.md, "The event stream").
watched AS (
    SELECT pg_notify('runqueue_events', x.id::text)
      FROM grown x
     WHERE EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = x.id)
)

-- name: stream_text --
-- ctx.stream's live text: one NOTIFY on runqueue_text per piece, only while the lease holds and
-- a web process watches the run; the row locked FOR SHARE, so a fence commits wholly before or
-- after it. Zero rows: fenced; no row written (docs/decisions.md, "Token streaming").
WITH owned AS (
    SELECT r.id
      FROM runqueue_run r
     WHERE r.id = %(run_id)s AND r.lease_epoch = %(epoch)s AND r.lease_token = %(token)s
       AND r.status = 'running'
       FOR SHARE
), sent AS (
    SELECT pg_notify('runqueue_text', u.piece)
      FROM owned o, unnest(%(pieces)s::text[]) AS u(piece)
     WHERE EXISTS (SELECT 1 FROM runqueue_stream_watch w WHERE w.run_id = o.id)
)
SELECT o.id, (SELECT count(*) FROM sent) AS sent FROM owned o;

-- name: stream_watch --
-- A web process starts streaming a run: the trigger on runqueue_run_event
-- NOTIFYs runqueue_events for it from now on. An upsert: several streams of
-- one process share the row.
INSERT INTO runqueue_stream_watch (run_id, watcher, expires_at)
VALUES (%(run_id)s, %(watcher)s, now() + make_interval(secs => %(ttl_seconds)s))
ON CONFLICT (run_id, watcher) DO UPDATE SET expires_at = EXCLUDED.expires_at;

-- name: stream_unwatch --
-- The process's last stream of the run ended.
DELETE FROM runqueue_stream_watch WHERE run_id = %(run_id)s AND watcher = %(watcher)s;

-- name: stream_watch_refresh --
-- A live process keeps its rows; rows of a process that died expire. Run by
-- each process's listener every minute or so.
WITH refreshed AS (
    UPDATE runqueue_stream_watch
       SET expires_at = now() + make_interval(secs => %(ttl_seconds)s)
     WHERE watcher = %(watcher)s
)
DELETE FROM runqueue_stream_watch WHERE expires_at < now() AND watcher <> %(watcher)s;
