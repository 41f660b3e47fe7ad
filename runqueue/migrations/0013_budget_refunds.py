"""Budgets under late settles and give-backs (docs/decisions.md,
"Budgets"): runqueue_budget_charge never resets a bucket newer than the
one it charges; runqueue_budget_settle charges an extra into the bucket of
the moment it got the budget's row, not its transaction's start; and
runqueue_budget_refund gives back the reservation of a run given back
before its handler started.

FUNCTIONS is functions.sql's text of these three as it was when written
(a migration is history; see 0006_function_source); PREVIOUS, the two
changed as 0011 installed them.
"""

from django.db import migrations

FUNCTIONS = r"""
-- Add tokens and requests to the ring's bucket n of a budget's row (locked
-- by the caller). It never resets a bucket newer than n: a slot holding an
-- older bucket starts again from zero; when n has left the ring (its slot
-- holds a bucket 11 or more newer, the caller's instant was read before a
-- long wait) a charge goes into the newest bucket instead, so what it adds
-- still counts, and a refund (negative) has nothing left to take back. A
-- refund comes off bucket n only while the ring holds it, and never takes
-- a bucket below zero.
CREATE OR REPLACE FUNCTION runqueue_budget_charge(
    p_id bigint, n bigint, p_tokens bigint, p_requests bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    held bigint;
    newest bigint;
BEGIN
    SELECT b.ring_buckets[n % 11 + 1], (SELECT max(u) FROM unnest(b.ring_buckets) AS u)
      INTO held, newest
      FROM runqueue_budget b
     WHERE b.id = p_id;
    IF p_tokens < 0 OR p_requests < 0 THEN
        IF held IS DISTINCT FROM n THEN
            RETURN;
        END IF;
    ELSIF n <= newest - 11 THEN
        n := newest;
    END IF;
    UPDATE runqueue_budget
       SET ring_tokens[n % 11 + 1] = greatest(0, CASE WHEN ring_buckets[n % 11 + 1] = n
                                                      THEN ring_tokens[n % 11 + 1] ELSE 0 END
                                                 + p_tokens),
           ring_requests[n % 11 + 1] = greatest(0, CASE WHEN ring_buckets[n % 11 + 1] = n
                                                        THEN ring_requests[n % 11 + 1] ELSE 0 END
                                                   + p_requests),
           ring_buckets[n % 11 + 1] = n
     WHERE id = p_id;
END;
$fn$;

-- Correct a reservation of p_reserved tokens made at p_at to p_used: a
-- refund comes off the bucket it was reserved in (if that bucket is still
-- in the ring: once it left the window there is nothing to give back); an
-- extra charge goes into the bucket of the moment this got the budget's
-- row (clock_timestamp(), as ctx.reserve counts from), so later
-- reservations wait for it. Not the transaction's now(): a settle that
-- waited over 1.1 windows for the row would charge a bucket whose ring
-- slot a newer one holds by then (runqueue_budget_charge never resets it).
-- The tenant's pass moves by the difference too. Returns the correction
-- (used - reserved), 0 without such a budget.
CREATE OR REPLACE FUNCTION runqueue_budget_settle(
    p_key text, p_tenant text, p_at timestamptz, p_reserved bigint, p_used bigint)
    RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    b runqueue_budget%ROWTYPE;
    delta bigint := p_used - p_reserved;
    share float8;
BEGIN
    SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE;
    IF NOT FOUND OR delta = 0 THEN
        RETURN 0;
    END IF;
    PERFORM runqueue_budget_charge(
        b.id,
        runqueue_budget_bucket(b.per_seconds, CASE WHEN delta < 0 THEN p_at
                                                   ELSE clock_timestamp() END),
        delta, 0);
    IF b.tokens IS NOT NULL THEN
        share := coalesce((b.shares ->> p_tenant)::float8, 1);
        UPDATE runqueue_budget
           SET passes = passes || jsonb_build_object(
                   p_tenant,
                   greatest(coalesce((passes ->> p_tenant)::float8, vtime), vtime)
                   + delta::float8 / greatest(tokens, 1) / share)
         WHERE id = b.id;
    END IF;
    RETURN delta;
END;
$fn$;

-- Give back a reservation whose call was never made (a run given back
-- before its handler started, docs/decisions.md "Budgets"): its request
-- and p_tokens come off the bucket of p_at, the instant it was reserved
-- at, while the ring holds that bucket (once it left the window there is
-- nothing to give back); the tenant's pass moves back by what the
-- reservation added to it, never below vtime. Returns whether the ring
-- still held it; false without such a budget.
CREATE OR REPLACE FUNCTION runqueue_budget_refund(
    p_key text, p_tenant text, p_at timestamptz, p_tokens bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    b runqueue_budget%ROWTYPE;
    n bigint;
    unit float8;
BEGIN
    SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    n := runqueue_budget_bucket(b.per_seconds, p_at);
    IF b.ring_buckets[n % 11 + 1] IS DISTINCT FROM n THEN
        RETURN false;
    END IF;
    PERFORM runqueue_budget_charge(b.id, n, -p_tokens, -1);
    -- The unit runqueue_budget_take added to the pass.
    unit := CASE WHEN b.tokens IS NULL THEN 1.0 / coalesce(b.requests, 1)
                 ELSE p_tokens::float8 / greatest(b.tokens, 1) END;
    UPDATE runqueue_budget
       SET passes = passes || jsonb_build_object(
               p_tenant,
               greatest((passes ->> p_tenant)::float8
                        - unit / coalesce((shares ->> p_tenant)::float8, 1), vtime))
     WHERE id = b.id AND passes ? p_tenant;
    RETURN true;
END;
$fn$;
"""

PREVIOUS = r"""
-- Add tokens and requests to the ring's bucket n of a budget's row (locked
-- by the caller); the slot of an older bucket starts again from zero. A
-- negative charge (a refund) never takes a bucket below zero.
CREATE OR REPLACE FUNCTION runqueue_budget_charge(
    p_id bigint, n bigint, p_tokens bigint, p_requests bigint) RETURNS void
LANGUAGE sql VOLATILE AS $$
UPDATE runqueue_budget
   SET ring_tokens[n % 11 + 1] = greatest(0, CASE WHEN ring_buckets[n % 11 + 1] = n
                                                  THEN ring_tokens[n % 11 + 1] ELSE 0 END
                                             + p_tokens),
       ring_requests[n % 11 + 1] = greatest(0, CASE WHEN ring_buckets[n % 11 + 1] = n
                                                    THEN ring_requests[n % 11 + 1] ELSE 0 END
                                               + p_requests),
       ring_buckets[n % 11 + 1] = n
 WHERE id = p_id
$$;

-- Correct a reservation of p_reserved tokens made at p_at to p_used: a
-- refund comes off the bucket it was reserved in (if that bucket is still
-- in the ring: once it left the window there is nothing to give back); an
-- extra charge goes into the bucket of now, so later reservations wait for
-- it. The tenant's pass moves by the difference too. Returns the
-- correction (used - reserved), 0 without such a budget.
CREATE OR REPLACE FUNCTION runqueue_budget_settle(
    p_key text, p_tenant text, p_at timestamptz, p_reserved bigint, p_used bigint)
    RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    b runqueue_budget%ROWTYPE;
    delta bigint := p_used - p_reserved;
    share float8;
BEGIN
    SELECT * INTO b FROM runqueue_budget WHERE key = p_key FOR NO KEY UPDATE;
    IF NOT FOUND OR delta = 0 THEN
        RETURN 0;
    END IF;
    IF delta < 0 THEN
        PERFORM runqueue_budget_charge(
            b.id, runqueue_budget_bucket(b.per_seconds, p_at), delta, 0)
          WHERE b.ring_buckets[runqueue_budget_bucket(b.per_seconds, p_at) % 11 + 1]
                = runqueue_budget_bucket(b.per_seconds, p_at);
    ELSE
        PERFORM runqueue_budget_charge(
            b.id, runqueue_budget_bucket(b.per_seconds, now()), delta, 0);
    END IF;
    IF b.tokens IS NOT NULL THEN
        share := coalesce((b.shares ->> p_tenant)::float8, 1);
        UPDATE runqueue_budget
           SET passes = passes || jsonb_build_object(
                   p_tenant,
                   greatest(coalesce((passes ->> p_tenant)::float8, vtime), vtime)
                   + delta::float8 / greatest(tokens, 1) / share)
         WHERE id = b.id;
    END IF;
    RETURN delta;
END;
$fn$;
"""

NEW_SIGNATURE = "runqueue_budget_refund(text, text, timestamptz, bigint)"


class Migration(migrations.Migration):
    dependencies = [("runqueue", "0012_subagents")]

    operations = [
        migrations.RunSQL(FUNCTIONS, reverse_sql=[f"DROP FUNCTION {NEW_SIGNATURE}", PREVIOUS]),
    ]
