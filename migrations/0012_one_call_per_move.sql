-- A plan act's move in one SQL call, and the functions on its path in plpgsql: a SQL-language
-- function that is not inlined (every SECURITY DEFINER one) is planned again on each call, while
-- plpgsql keeps its plans for the session.
SET LOCAL ROLE core_owner;

-- The pool row, FOR UPDATE, taken once per transaction: every conferral function takes it again
-- (spec rule 2), and the pool a transaction locked last needs no second statement. The mark is
-- transaction-local and set only once the lock is granted; a row lock is held to the end of the
-- transaction, and a rolled-back subtransaction reverts both together.
CREATE OR REPLACE FUNCTION core.lock_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    IF current_setting('core.locked_pool', true) = p_pool::text THEN
        RETURN;
    END IF;
    PERFORM 1 FROM core.resource_pools WHERE pool_id = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool_not_found' USING ERRCODE = 'MC004', DETAIL = format('pool %s', p_pool);
    END IF;
    PERFORM set_config('core.locked_pool', p_pool::text, true);
END
$$;

CREATE OR REPLACE FUNCTION core.lock_pools(p_pools bigint[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    PERFORM 1 FROM core.resource_pools WHERE pool_id = ANY (p_pools) ORDER BY pool_id FOR UPDATE;
END
$$;

CREATE OR REPLACE FUNCTION core.lock_plan_act_obligation(p_act bigint, p_pool bigint)
RETURNS TABLE (state text, owns boolean, org_type_id bigint, from_ladder_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT o.state, t.default_owner_act_id = p_act, o.org_type_id, r.from_ladder_id
      FROM core.plan_act_obligations o
      JOIN core.org_types t ON t.org_type_id = o.org_type_id
      JOIN core.plan_act_reached_types r ON r.plan_act_id = o.plan_act_id AND r.org_type_id = o.org_type_id
     WHERE o.plan_act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE OF o;
END
$$;

-- The move's floor: a floor grant of the pool on a ladder that is not the type's default now,
-- or on the default ladder but of a product that is not its rank 0 now (a reorder moved it).
CREATE OR REPLACE FUNCTION core.floor_off_default(p_pool bigint, p_type bigint)
RETURNS TABLE (conferral_id bigint, grant_id bigint, product_id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.conferral_id, g.grant_id, g.product_id
      FROM core.positions p
      JOIN core.conferrals c ON c.conferral_id = p.conferral_id
      JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
      JOIN core.org_types t ON t.org_type_id = p_type
     WHERE p.pool_id = p_pool
       AND (p.plan_ladder_id IS DISTINCT FROM t.default_plan_ladder_id OR p.rank <> 0)
     ORDER BY c.conferral_id
     LIMIT 1;
END
$$;

CREATE OR REPLACE FUNCTION core.settle_plan_act_obligation(p_act bigint, p_pool bigint, p_state text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    UPDATE core.plan_act_obligations SET state = p_state, settled_at = now(), attempts = attempts + 1
     WHERE plan_act_id = p_act AND pool_id = p_pool AND state = 'pending';
END
$$;

-- A grant inserted active is not written a second time when it is conferred.
CREATE OR REPLACE FUNCTION core.confer_grant(p_grant bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    g core.grants%ROWTYPE;
    p bigint;
    c bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO g FROM core.grants WHERE grant_id = p_grant;
    SELECT pool_id INTO p FROM core.resource_pools WHERE organization_id = g.organization_id AND is_default;
    IF p IS NULL THEN
        RETURN NULL;
    END IF;
    c := core.confer(p, g.product_id, g.grant_id, NULL, g.quantity, g.starts_at, g.ends_at);
    IF g.status <> 'active' OR g.replaced_at IS NOT NULL THEN
        UPDATE core.grants SET status = 'active', replaced_at = NULL WHERE grant_id = p_grant;
    END IF;
    RETURN c;
END
$$;

-- EnactObligation: one organization's move, in the spec's order: the pool row, then the
-- obligation row (core.lock_plan_act_obligation, with the type's owner read in the same
-- statement), then the bucket's work under the pool row, then the settlement. Returns the state
-- it settled, or NULL when there was nothing to do (settled already, or not pending).
CREATE FUNCTION core.enact_plan_act_obligation(p_act bigint, p_pool bigint) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    ob record;
    fl record;
    disp text;
    org bigint;
    legacy bigint;
    why text;
    settled text;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT * INTO ob FROM core.lock_plan_act_obligation(p_act, p_pool);
    IF NOT FOUND OR ob.state <> 'pending' THEN
        RETURN NULL;
    END IF;
    IF NOT ob.owns THEN
        -- A later act owns the type's default now: this one no longer moves it.
        settled := 'superseded';
    ELSE
        SELECT disposition INTO disp FROM core.plan_acts WHERE plan_act_id = p_act;
        SELECT * INTO fl FROM core.floor_off_default(p_pool, ob.org_type_id);
        IF fl.conferral_id IS NULL THEN
            PERFORM core.reapply_defaults_if_vacant(p_pool, p_act);
            settled := 'vacant';
        ELSIF disp = 'grandfather' THEN
            -- The incumbent keeps its old floor, as a legacy grant of the same product.
            PERFORM core.end_conferral(fl.conferral_id, 'grandfathered');
            SELECT organization_id INTO org FROM core.resource_pools WHERE pool_id = p_pool;
            why := format('grandfathered by plan act #%s (was floor grant #%s)', p_act, fl.grant_id);
            INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason, plan_act_id)
            VALUES (org, fl.product_id, 1, 'legacy', 'active', why, p_act)
            RETURNING grant_id INTO legacy;
            INSERT INTO core.grant_events (grant_id, organization_id, act, reason, detail)
            VALUES (legacy, org, 'grandfathered', why, jsonb_build_object('plan_act_id', p_act));
            PERFORM core.confer_grant(legacy);
            PERFORM core.reapply_defaults_if_vacant(p_pool, p_act);
            settled := 'grandfathered';
        ELSE
            -- No resumption: a floor displaces nothing, and what a floor held was free for any
            -- replaced grant or displaced subscription all along (core.ladders_free_for).
            PERFORM core.end_conferral(fl.conferral_id, 'migrated');
            PERFORM core.reapply_defaults_if_vacant(p_pool, p_act);
            settled := 'migrated';
        END IF;
        PERFORM core.materialize_pool(p_pool);
        IF settled = 'grandfathered' THEN
            -- RequestPoolSubscriptionReconciles: inserts, no lock.
            INSERT INTO core.outbox (kind, subscription_id, payload)
            SELECT 'reconcile_subscription', s.subscription_id,
                   jsonb_build_object('stripe_subscription_id', s.stripe_subscription_id, 'cause', 'grandfathered')
              FROM core.subscriptions s
             WHERE s.organization_id = org AND s.status NOT IN ('canceled', 'incomplete_expired')
             ORDER BY s.subscription_id;
        END IF;
    END IF;
    PERFORM core.settle_plan_act_obligation(p_act, p_pool, settled);
    -- The move commits without waiting for its WAL to reach the disk: it is work the drain can
    -- redo. A crash that loses it loses it whole (the settlement with the effects), so the
    -- obligation is pending again and the next drain moves the organization once; any later
    -- synchronous commit (the act's finish, a grant act) flushes it first.
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN settled;
END
$$;

REVOKE EXECUTE ON FUNCTION core.enact_plan_act_obligation(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.enact_plan_act_obligation(bigint, bigint) TO console_runtime;

RESET ROLE;
