-- The priority classes' functions, rendered from runqueue.models.PriorityClass
-- (runqueue.sql.classes).

-- function: runqueue_priority_class --
-- The index of a priority's class (runqueue.models.PriorityClass). Each class function is
-- LANGUAGE sql IMMUTABLE, one line, no STRICT or SET: the planner inlines it
-- (docs/decisions/queue.md, "Claim and leases").
CREATE OR REPLACE FUNCTION runqueue_priority_class(priority integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT least(priority / 10, 2)$$;

-- function: runqueue_priority_class_low --
-- The lowest priority of the class at idx: the class's value, as
-- ConcurrencyLimit and PausedKind store it. NULL for no class.
CREATE OR REPLACE FUNCTION runqueue_priority_class_low(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 0 WHEN 1 THEN 10 WHEN 2 THEN 20 END$$;

-- function: runqueue_priority_class_high --
-- The highest priority of the class at idx. NULL for no class.
CREATE OR REPLACE FUNCTION runqueue_priority_class_high(idx integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$SELECT CASE idx WHEN 0 THEN 9 WHEN 1 THEN 19 WHEN 2 THEN 32767 END$$;

-- function: runqueue_priority_classes --
-- Every class as (idx, low, high), in order.
CREATE OR REPLACE FUNCTION runqueue_priority_classes()
    RETURNS TABLE (idx integer, low integer, high integer)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$VALUES (0, 0, 9), (1, 10, 19), (2, 20, 32767)$$;
