-- The database server itself: its clock, a transaction's setting, a NOTIFY,
-- and where a replica's replay stands.

-- name: clock --
-- The database clock: schedules are evaluated against now(), like leases,
-- never against a worker's clock.
SELECT now();

-- name: set_config --
-- A setting for the current transaction only (in autocommit: nothing); set_config takes the
-- value as a parameter, which SET LOCAL cannot. Never a session's: a transaction pooler hands
-- the server connection to other clients.
SELECT set_config(%(name)s, %(value)s, true);

-- name: notify --
-- Wake idle workers; sent inside the transaction, delivered on commit.
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: read_lag --
-- Reads from a replica: whether this server is a standby, its lag in seconds (0 when caught up
-- or no standby; NULL: nothing replayed yet) and its replay position. Why:
-- docs/decisions/schedules-webhooks.md, "Reads from a replica".
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN 0
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                 AND EXISTS (SELECT FROM pg_stat_wal_receiver) THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
       END,
       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END;

-- name: wal_written --
-- Reads from a replica: where the primary's WAL ends now, past the commit
-- of a write this session just made; a later read of the same staff member
-- goes to the replica only once it has replayed this far.
SELECT pg_current_wal_insert_lsn()::text;

-- name: bounded_reads --
-- runqueue.reads.bounded: the planner walks indexes in order and stops at the LIMIT, for the
-- transaction only (as set_config), both settings in one round trip.
SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true);
