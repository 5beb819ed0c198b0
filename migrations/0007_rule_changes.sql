-- Rule changes: an operator's batch of deltas to one set's rules. Each delta is an act with an
-- obligation per pool that carried the set when it committed; the commit settles them inline at
-- or below the sync cap, above it the drain settles one pool per short transaction.
SET LOCAL ROLE core_owner;

CREATE TABLE core.entitlement_set_changes (
    change_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entitlement_set_id bigint NOT NULL REFERENCES core.entitlement_sets,
    created_by bigint REFERENCES core.accounts,
    reason text NOT NULL DEFAULT '',
    -- 'draining' until every obligation settled; 'settled' after.
    state text NOT NULL DEFAULT 'draining' CHECK (state IN ('draining', 'settled')),
    -- Settled inside the commit (at or below the sync cap).
    settled_inline boolean NOT NULL DEFAULT false,
    -- Whether every carrying pool has its obligations written. At or below the sync cap the
    -- commit writes them; above it the drain lists them in batches after the commit, so the
    -- exclusive hold does not grow with the number of pools (see docs/domain.md).
    listed boolean NOT NULL DEFAULT true,
    listed_through bigint NOT NULL DEFAULT 0,
    pools_owed integer NOT NULL DEFAULT 0,
    committed_at timestamptz NOT NULL DEFAULT now(),
    -- How long the commit held the exclusive rendezvous, as the service measured it.
    hold_ms double precision,
    settled_at timestamptz
);
CREATE INDEX entitlement_set_changes_draining ON core.entitlement_set_changes (change_id) WHERE state = 'draining';

-- One delta: a rule's value before and after (NULL both sides of a kind: no rule).
CREATE TABLE core.entitlement_set_change_acts (
    act_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    change_id bigint NOT NULL REFERENCES core.entitlement_set_changes,
    position integer NOT NULL,
    resource_key text NOT NULL REFERENCES core.resource_keys,
    old_numeric bigint,
    old_flag boolean,
    new_numeric bigint,
    new_flag boolean,
    UNIQUE (change_id, position)
);

-- What an act owes one pool: a materialization under the new rule. Kept lean (no foreign key to
-- the pool, a small state) because a change to a widely carried set writes one per pool inside
-- the exclusive hold.
CREATE TABLE core.entitlement_set_change_obligations (
    act_id bigint NOT NULL REFERENCES core.entitlement_set_change_acts,
    pool_id bigint NOT NULL,
    state text NOT NULL DEFAULT 'owed' CHECK (state IN ('owed', 'settled', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error text,
    settled_at timestamptz,
    PRIMARY KEY (act_id, pool_id)
);
-- Every act of a batch owes the same pools (one set, one moment) and a pool's acts settle
-- together, so the drain walks the first act's rows in pool_id order on the primary key; no
-- second index slows the commit's inserts.

-- Holds the exclusive rendezvous? (A rule change must.)
CREATE FUNCTION core.assert_exclusive_rendezvous() RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1 AND mode = 'ExclusiveLock'
          AND classid = ((core.rendezvous_key() >> 32) & 4294967295)::oid
          AND objid = (core.rendezvous_key() & 4294967295)::oid) THEN
        RAISE EXCEPTION 'materialization_rendezvous_missing' USING ERRCODE = 'MC001',
            DETAIL = 'A rule change ran without the exclusive materialization rendezvous.',
            HINT = 'Open the transaction as RuleChange.';
    END IF;
END
$$;

-- The drain lists a set's carrying pools in pool_id order, by product.
CREATE INDEX conferrals_product_pool_holding ON core.conferrals (product_id, pool_id) WHERE state = 'holding';

-- One delta of a batch: under the exclusive rendezvous, the set row (again; the batch took it
-- first), then the rule row; record the act, write the rule, and, when `p_list`, owe every pool
-- that carries the set now. Returns the act and how many pools it owes.
CREATE FUNCTION core.commit_rule_change(
    p_change bigint, p_position integer, p_set bigint, p_key text, p_numeric bigint, p_flag boolean, p_list boolean
) RETURNS TABLE (act_id bigint, pools bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    old_n bigint;
    old_f boolean;
    a bigint;
    n bigint;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    PERFORM 1 FROM core.entitlement_sets WHERE entitlement_set_id = p_set FOR UPDATE;
    SELECT r.numeric_value, r.flag_value INTO old_n, old_f
      FROM core.entitlement_set_rules r
     WHERE r.entitlement_set_id = p_set AND r.resource_key = p_key
       FOR UPDATE;
    INSERT INTO core.entitlement_set_change_acts (change_id, position, resource_key, old_numeric, old_flag, new_numeric, new_flag)
    VALUES (p_change, p_position, p_key, old_n, old_f, p_numeric, p_flag)
    RETURNING entitlement_set_change_acts.act_id INTO a;
    IF p_numeric IS NULL AND p_flag IS NULL THEN
        DELETE FROM core.entitlement_set_rules WHERE entitlement_set_id = p_set AND resource_key = p_key;
    ELSE
        INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, numeric_value, flag_value)
        VALUES (p_set, p_key, p_numeric, p_flag)
        ON CONFLICT (entitlement_set_id, resource_key)
        DO UPDATE SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value;
    END IF;
    n := 0;
    IF p_list THEN
        INSERT INTO core.entitlement_set_change_obligations (act_id, pool_id)
        SELECT DISTINCT a, c.pool_id
          FROM core.products p
          JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding'
         WHERE p.entitlement_set_id = p_set;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT a, n;
END
$$;

-- Settle one act's obligation to one pool: the pool row, then the obligation row. With no
-- error, an owed (or failed) obligation is marked settled (the caller materialized the pool
-- under the same pool row); with an error, the attempt is recorded and the next one scheduled
-- with backoff. Returns whether it changed the obligation (a second pass changes nothing).
CREATE FUNCTION core.settle_obligation(p_act bigint, p_pool bigint, p_error text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    st text;
    tries integer;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT o.state, o.attempts INTO st, tries
      FROM core.entitlement_set_change_obligations o
     WHERE o.act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE;
    IF st IS NULL OR st = 'settled' THEN
        RETURN false;
    END IF;
    IF p_error IS NULL THEN
        UPDATE core.entitlement_set_change_obligations
           SET state = 'settled', settled_at = now(), attempts = tries + 1, next_attempt_at = NULL
         WHERE act_id = p_act AND pool_id = p_pool;
    ELSE
        -- 2 s, 4 s, 8 s ... capped at 10 minutes.
        UPDATE core.entitlement_set_change_obligations
           SET state = 'failed', attempts = tries + 1, last_error = left(p_error, 2000),
               next_attempt_at = now() + least(interval '10 minutes', interval '2 seconds' * power(2, least(tries, 12)))
         WHERE act_id = p_act AND pool_id = p_pool;
    END IF;
    RETURN true;
END
$$;

-- The drain's listing, above the sync cap: the next pools (after the change's mark, in pool_id
-- order) that carry the set now, owed by every act of the change. Under the shared rendezvous.
-- A pool that stopped carrying since the commit was materialized then, under the new rules; one
-- that started since was materialized under them too; so listing after the commit owes exactly
-- the pools that still need it. Returns how many it listed; done when a batch comes back short.
CREATE FUNCTION core.list_rule_change_obligations(p_change bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    ch core.entitlement_set_changes%ROWTYPE;
    pools bigint[];
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO ch FROM core.entitlement_set_changes WHERE change_id = p_change AND NOT listed FOR UPDATE;
    IF ch.change_id IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(pool_id ORDER BY pool_id) INTO pools FROM (
        SELECT DISTINCT c.pool_id
          FROM core.products p
          JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding' AND c.pool_id > ch.listed_through
         WHERE p.entitlement_set_id = ch.entitlement_set_id
         ORDER BY c.pool_id LIMIT p_limit) x;
    n := coalesce(array_length(pools, 1), 0);
    IF n > 0 THEN
        INSERT INTO core.entitlement_set_change_obligations (act_id, pool_id)
        SELECT a.act_id, p.pool_id FROM core.entitlement_set_change_acts a CROSS JOIN unnest(pools) AS p(pool_id)
         WHERE a.change_id = p_change
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE core.entitlement_set_changes
       SET listed_through = coalesce(pools[n], listed_through), listed = (n < p_limit),
           pools_owed = pools_owed + n
     WHERE change_id = p_change;
    RETURN n;
END
$$;

-- A change is settled when it is listed and none of its obligations is unsettled.
CREATE FUNCTION core.finish_rule_change_if_settled(p_change bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    UPDATE core.entitlement_set_changes ch SET state = 'settled', settled_at = now()
     WHERE ch.change_id = p_change AND ch.state = 'draining' AND ch.listed
       AND NOT EXISTS (
           SELECT 1 FROM core.entitlement_set_change_acts a
           JOIN core.entitlement_set_change_obligations o ON o.act_id = a.act_id
           WHERE a.change_id = p_change AND o.state <> 'settled');
    RETURN FOUND;
END
$$;

GRANT SELECT ON core.entitlement_set_changes, core.entitlement_set_change_acts, core.entitlement_set_change_obligations
TO console_runtime;
GRANT INSERT ON core.entitlement_set_changes TO console_runtime;
GRANT UPDATE (pools_owed, settled_inline, hold_ms, listed) ON core.entitlement_set_changes TO console_runtime;
-- The operator's Retry brings failed obligations forward.
GRANT UPDATE (next_attempt_at) ON core.entitlement_set_change_obligations TO console_runtime;
REVOKE EXECUTE ON FUNCTION core.commit_rule_change(bigint, integer, bigint, text, bigint, boolean, boolean),
    core.list_rule_change_obligations(bigint, integer),
    core.settle_obligation(bigint, bigint, text), core.finish_rule_change_if_settled(bigint),
    core.assert_exclusive_rendezvous() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.commit_rule_change(bigint, integer, bigint, text, bigint, boolean, boolean),
    core.list_rule_change_obligations(bigint, integer),
    core.settle_obligation(bigint, bigint, text), core.finish_rule_change_if_settled(bigint),
    core.assert_exclusive_rendezvous()
TO console_runtime;

RESET ROLE;
