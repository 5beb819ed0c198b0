-- Materialization in one statement, with plans the session caches: the first version built a
-- temporary table per call and computed through a SQL function that is planned on every call,
-- which made a drain settle a few hundred pools a second.
SET LOCAL ROLE core_owner;

-- The rendezvous assertion runs several times per settled pool; a transaction-scoped advisory
-- lock cannot be released before the transaction ends, so once seen it is remembered in a
-- transaction-local setting and pg_locks is read once per transaction.
CREATE OR REPLACE FUNCTION core.assert_rendezvous() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('core.holds_rendezvous', true) = 'yes' THEN
        RETURN;
    END IF;
    IF NOT core.holds_rendezvous() THEN
        RAISE EXCEPTION 'materialization_rendezvous_missing'
            USING ERRCODE = 'MC001',
                  DETAIL = 'A function that materializes or settles a pool ran in a transaction that does not hold the materialization rendezvous.',
                  HINT = 'Open the transaction as Materializing or RuleChange.';
    END IF;
    PERFORM set_config('core.holds_rendezvous', 'yes', true);
END
$$;

CREATE OR REPLACE FUNCTION core.compute_entitlements(p_pool bigint)
RETURNS TABLE (resource_key text, numeric_value bigint, flag_value boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    RETURN QUERY
    SELECT r.resource_key,
           CASE WHEN k.kind = 'numeric' THEN sum(r.numeric_value * c.quantity)::bigint END,
           CASE WHEN k.kind = 'flag' THEN bool_or(r.flag_value) END
    FROM core.conferrals c
    JOIN core.products p ON p.product_id = c.product_id
    JOIN core.entitlement_set_rules r ON r.entitlement_set_id = p.entitlement_set_id
    JOIN core.resource_keys k ON k.resource_key = r.resource_key
    WHERE c.pool_id = p_pool AND c.state = 'holding' AND NOT c.suspended
    GROUP BY r.resource_key, k.kind;
END
$$;

CREATE OR REPLACE FUNCTION core.materialize_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    -- One statement: its parts see one snapshot, and the upsert writes per key in byte order.
    WITH m AS MATERIALIZED (
        SELECT r.resource_key,
               CASE WHEN k.kind = 'numeric' THEN sum(r.numeric_value * c.quantity)::bigint END AS numeric_value,
               CASE WHEN k.kind = 'flag' THEN bool_or(r.flag_value) END AS flag_value
        FROM core.conferrals c
        JOIN core.products p ON p.product_id = c.product_id
        JOIN core.entitlement_set_rules r ON r.entitlement_set_id = p.entitlement_set_id
        JOIN core.resource_keys k ON k.resource_key = r.resource_key
        WHERE c.pool_id = p_pool AND c.state = 'holding' AND NOT c.suspended
        GROUP BY r.resource_key, k.kind
    ),
    gone AS (
        DELETE FROM core.pool_entitlements e
         WHERE e.pool_id = p_pool AND NOT EXISTS (SELECT 1 FROM m WHERE m.resource_key = e.resource_key)
    ),
    written AS (
        INSERT INTO core.pool_entitlements (pool_id, resource_key, numeric_value, flag_value)
        SELECT p_pool, m.resource_key, m.numeric_value, m.flag_value FROM m
        ORDER BY m.resource_key COLLATE "C"
        ON CONFLICT (pool_id, resource_key) DO UPDATE
           SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value
         WHERE (core.pool_entitlements.numeric_value, core.pool_entitlements.flag_value)
               IS DISTINCT FROM (EXCLUDED.numeric_value, EXCLUDED.flag_value)
    )
    INSERT INTO core.numeric_entitlement_usage (pool_id, resource_key)
    SELECT p_pool, m.resource_key FROM m WHERE m.numeric_value IS NOT NULL
    ORDER BY m.resource_key COLLATE "C"
    ON CONFLICT DO NOTHING;
END
$$;

-- settlePool in one call: the pool row, the acts of the change the pool still owes (read under
-- the row), one materialization, then the obligation rows of those acts settled (after the pool
-- row, as core.settle_obligation takes them). False when nothing was owed any more.
CREATE FUNCTION core.settle_change_pool(p_change bigint, p_pool bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    owed bigint[];
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT array_agg(o.act_id ORDER BY x.position) INTO owed
      FROM core.entitlement_set_change_obligations o
      JOIN core.entitlement_set_change_acts x ON x.act_id = o.act_id
     WHERE x.change_id = p_change AND o.pool_id = p_pool AND o.state <> 'settled';
    IF owed IS NULL THEN
        RETURN false;
    END IF;
    PERFORM core.materialize_pool(p_pool);
    -- Every owed act of the pool settles in one statement (what core.settle_obligation does per
    -- act, without a round of statements each): the pool row is held, so no other pass can be
    -- settling or failing these rows, and they are all this one pool's.
    UPDATE core.entitlement_set_change_obligations
       SET state = 'settled', settled_at = now(), attempts = attempts + 1, next_attempt_at = NULL
     WHERE act_id = ANY (owed) AND pool_id = p_pool AND state <> 'settled';
    RETURN true;
END
$$;
REVOKE EXECUTE ON FUNCTION core.settle_change_pool(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.settle_change_pool(bigint, bigint) TO console_runtime;

RESET ROLE;
