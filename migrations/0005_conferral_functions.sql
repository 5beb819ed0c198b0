-- The conferral functions the spec names. Each asserts the rendezvous and locks the pool row
-- itself (spec rules 1 and 2), so a caller that goes straight to one still holds it. They are
-- SECURITY DEFINER, owned by core_owner: console_runtime writes conferrals, positions and
-- entitlements only through them (spec rule 9).
SET LOCAL ROLE core_owner;

-- The pool row, FOR UPDATE: everything that changes a pool's positions or entitlements.
CREATE FUNCTION core.lock_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    PERFORM 1 FROM core.resource_pools WHERE pool_id = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool_not_found' USING ERRCODE = 'MC004', DETAIL = format('pool %s', p_pool);
    END IF;
END
$$;

-- Several pool rows in ascending pool_id order, deduplicated (spec rule 3).
CREATE FUNCTION core.lock_pools(p_pools bigint[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT NULL::void FROM (
        SELECT pool_id FROM core.resource_pools
        WHERE pool_id = ANY (p_pools) ORDER BY pool_id FOR UPDATE
    ) locked;
$$;

-- Take a holder off all its ladders, as a whole: a floor simply ends, a grant becomes replaced,
-- a subscription provision gets a displacement record. Internal: the caller holds the pool row.
CREATE FUNCTION core.displace_conferral(p_holder bigint, p_by bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    h core.conferrals%ROWTYPE;
    g_kind text;
BEGIN
    SELECT * INTO h FROM core.conferrals WHERE conferral_id = p_holder;
    DELETE FROM core.positions WHERE conferral_id = p_holder;
    UPDATE core.conferrals
       SET state = 'ended', ended_reason = 'displaced', ended_at = now(), displaced_by = p_by
     WHERE conferral_id = p_holder;
    IF h.grant_id IS NOT NULL THEN
        SELECT kind INTO g_kind FROM core.grants WHERE grant_id = h.grant_id;
        IF g_kind = 'floor' THEN
            UPDATE core.grants SET status = 'ended', ended_at = now() WHERE grant_id = h.grant_id;
        ELSE
            UPDATE core.grants SET status = 'replaced', replaced_at = now() WHERE grant_id = h.grant_id;
        END IF;
    ELSE
        -- One open displacement per item: a later one replaces it.
        INSERT INTO core.subscription_displacements (conferral_id, subscription_item_id, displaced_by)
        VALUES (p_holder, h.subscription_item_id, p_by)
        ON CONFLICT (subscription_item_id) WHERE delivered_at IS NULL
        DO UPDATE SET conferral_id = EXCLUDED.conferral_id, displaced_by = EXCLUDED.displaced_by, displaced_at = now();
    END IF;
END
$$;

-- Confer a product to a pool from a grant or a subscription item. The newcomer takes every
-- ladder of its product's shape; what held any of them is displaced as a whole.
CREATE FUNCTION core.confer(
    p_pool bigint, p_product bigint, p_grant bigint, p_item bigint, p_quantity integer,
    p_starts timestamptz DEFAULT now(), p_ends timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    c bigint;
    h bigint;
    vacated boolean := false;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    INSERT INTO core.conferrals (pool_id, product_id, grant_id, subscription_item_id, quantity, starts_at, ends_at)
    VALUES (p_pool, p_product, p_grant, p_item, p_quantity, p_starts, p_ends)
    RETURNING conferral_id INTO c;
    FOR h IN
        SELECT DISTINCT p.conferral_id
        FROM core.positions p
        JOIN core.plan_ladder_tiers t ON t.plan_ladder_id = p.plan_ladder_id AND t.product_id = p_product
        WHERE p.pool_id = p_pool
        ORDER BY p.conferral_id
    LOOP
        -- A holder with a ladder the newcomer does not take leaves that ladder vacant.
        vacated := vacated OR EXISTS (
            SELECT 1 FROM core.positions hp
            WHERE hp.conferral_id = h
              AND NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers t
                              WHERE t.product_id = p_product AND t.plan_ladder_id = hp.plan_ladder_id));
        PERFORM core.displace_conferral(h, c);
    END LOOP;
    INSERT INTO core.positions (pool_id, plan_ladder_id, conferral_id, rank)
    SELECT p_pool, t.plan_ladder_id, c, t.rank FROM core.plan_ladder_tiers t WHERE t.product_id = p_product;
    IF vacated THEN
        -- The ladders the displaced holder leaves behind fill as when a holder ends. What comes
        -- back takes only free or floor-held ladders, so it displaces nothing that vacates more.
        PERFORM core.resume_replaced_grants(p_pool);
        PERFORM core.deliver_displaced_subscriptions(p_pool);
        PERFORM core.reapply_defaults_if_vacant(p_pool);
    END IF;
    RETURN c;
END
$$;

-- End a conferral: it leaves its ladders. Coming back of what it displaced, and the floor, are
-- the caller's next steps (resumption, delivery, ReapplyDefaultsIfVacant). True when it ended a
-- holding conferral.
CREATE FUNCTION core.end_conferral(p_conferral bigint, p_reason text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    p bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT pool_id INTO p FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN false;
    END IF;
    PERFORM core.lock_pool(p);
    DELETE FROM core.positions WHERE conferral_id = p_conferral;
    UPDATE core.conferrals SET state = 'ended', ended_reason = p_reason, ended_at = now()
     WHERE conferral_id = p_conferral AND state = 'holding';
    RETURN FOUND;
END
$$;

-- Bring a holding conferral's positions in line with its product's shape now (after a tier
-- add, removal or renumbering): leave ladders no longer in the shape, take new ones (displacing
-- what holds them), and carry the current ranks.
CREATE FUNCTION core.align_conferral_shape(p_conferral bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    c core.conferrals%ROWTYPE;
    h bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO c FROM core.conferrals WHERE conferral_id = p_conferral;
    IF c.conferral_id IS NULL OR c.state <> 'holding' THEN
        RETURN;
    END IF;
    PERFORM core.lock_pool(c.pool_id);
    DELETE FROM core.positions p
     WHERE p.conferral_id = p_conferral
       AND NOT EXISTS (SELECT 1 FROM core.plan_ladder_tiers t
                        WHERE t.product_id = c.product_id AND t.plan_ladder_id = p.plan_ladder_id);
    UPDATE core.positions p SET rank = t.rank
      FROM core.plan_ladder_tiers t
     WHERE p.conferral_id = p_conferral AND t.product_id = c.product_id
       AND t.plan_ladder_id = p.plan_ladder_id AND p.rank <> t.rank;
    FOR h IN
        SELECT DISTINCT p.conferral_id
        FROM core.positions p
        JOIN core.plan_ladder_tiers t ON t.plan_ladder_id = p.plan_ladder_id AND t.product_id = c.product_id
        WHERE p.pool_id = c.pool_id AND p.conferral_id <> p_conferral
        ORDER BY p.conferral_id
    LOOP
        PERFORM core.displace_conferral(h, p_conferral);
    END LOOP;
    INSERT INTO core.positions (pool_id, plan_ladder_id, conferral_id, rank)
    SELECT c.pool_id, t.plan_ladder_id, p_conferral, t.rank
      FROM core.plan_ladder_tiers t
     WHERE t.product_id = c.product_id
    ON CONFLICT (pool_id, plan_ladder_id) DO NOTHING;
END
$$;

-- Change a conferral's quantity and end bound.
CREATE FUNCTION core.update_conferral_bounds(p_conferral bigint, p_quantity integer, p_ends timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    p bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT pool_id INTO p FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN;
    END IF;
    PERFORM core.lock_pool(p);
    UPDATE core.conferrals SET quantity = p_quantity, ends_at = p_ends
     WHERE conferral_id = p_conferral AND state = 'holding';
END
$$;

-- Suspend ('suspended') or reinstate ('active') the holding provisions of one subscription:
-- they keep their ladders either way. Returns how many changed.
CREATE FUNCTION core.sync_source_status(p_subscription bigint, p_status text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    IF p_status NOT IN ('active', 'suspended') THEN
        RAISE EXCEPTION 'unknown source status %', p_status USING ERRCODE = '22023';
    END IF;
    PERFORM core.lock_pools(ARRAY(
        SELECT DISTINCT c.pool_id FROM core.conferrals c
        JOIN core.subscription_items i USING (subscription_item_id)
        WHERE i.subscription_id = p_subscription AND c.state = 'holding'));
    UPDATE core.conferrals c SET suspended = (p_status = 'suspended')
      FROM core.subscription_items i
     WHERE i.subscription_item_id = c.subscription_item_id AND i.subscription_id = p_subscription
       AND c.state = 'holding' AND c.suspended <> (p_status = 'suspended');
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- A pool's entitlements from scratch: its holding, unsuspended conferrals; numeric keys sum
-- value x quantity, flags are true when any conferral says so. A pure read.
CREATE FUNCTION core.compute_entitlements(p_pool bigint)
RETURNS TABLE (resource_key text, numeric_value bigint, flag_value boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT r.resource_key,
           CASE WHEN k.kind = 'numeric' THEN sum(r.numeric_value * c.quantity)::bigint END,
           CASE WHEN k.kind = 'flag' THEN bool_or(r.flag_value) END
    FROM core.conferrals c
    JOIN core.products p USING (product_id)
    JOIN core.entitlement_set_rules r ON r.entitlement_set_id = p.entitlement_set_id
    JOIN core.resource_keys k ON k.resource_key = r.resource_key
    WHERE c.pool_id = p_pool AND c.state = 'holding' AND NOT c.suspended
    GROUP BY r.resource_key, k.kind
$$;

-- Materialize: write the pool's entitlements per resource key in byte order (the order
-- RegisterProviders stamps keys in, so the two wait in one direction), drop keys no longer
-- conferred, and make sure a usage row exists for every numeric key it has.
CREATE FUNCTION core.materialize_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    CREATE TEMP TABLE IF NOT EXISTS materialized (resource_key text, numeric_value bigint, flag_value boolean)
        ON COMMIT DROP;
    TRUNCATE materialized;
    INSERT INTO materialized SELECT * FROM core.compute_entitlements(p_pool);
    DELETE FROM core.pool_entitlements e
     WHERE e.pool_id = p_pool AND NOT EXISTS (SELECT 1 FROM materialized m WHERE m.resource_key = e.resource_key);
    INSERT INTO core.pool_entitlements (pool_id, resource_key, numeric_value, flag_value)
    SELECT p_pool, m.resource_key, m.numeric_value, m.flag_value FROM materialized m
    ORDER BY m.resource_key COLLATE "C"
    ON CONFLICT (pool_id, resource_key) DO UPDATE
       SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value
     WHERE (core.pool_entitlements.numeric_value, core.pool_entitlements.flag_value)
           IS DISTINCT FROM (EXCLUDED.numeric_value, EXCLUDED.flag_value);
    INSERT INTO core.numeric_entitlement_usage (pool_id, resource_key)
    SELECT p_pool, m.resource_key FROM materialized m WHERE m.numeric_value IS NOT NULL
    ORDER BY m.resource_key COLLATE "C"
    ON CONFLICT DO NOTHING;
END
$$;

-- Can a product take its ladders in this pool without displacing anything but a floor?
CREATE FUNCTION core.ladders_free_for(p_pool bigint, p_product bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT NOT EXISTS (
        SELECT 1
        FROM core.plan_ladder_tiers t
        JOIN core.positions p ON p.pool_id = p_pool AND p.plan_ladder_id = t.plan_ladder_id
        JOIN core.conferrals c ON c.conferral_id = p.conferral_id
        LEFT JOIN core.grants g ON g.grant_id = c.grant_id
        WHERE t.product_id = p_product AND g.kind IS DISTINCT FROM 'floor'
    )
$$;

-- Confer a grant to its organization's default pool (ConferGrantTx's SQL): the grant becomes
-- active. Returns the conferral, or NULL for a grant with no organization yet.
CREATE FUNCTION core.confer_grant(p_grant bigint) RETURNS bigint
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
    UPDATE core.grants SET status = 'active', replaced_at = NULL WHERE grant_id = p_grant;
    RETURN c;
END
$$;

-- Resume replaced grants (ResumeReplacedGrantsTx's SQL): under the pool row, most recently
-- replaced first, each grant whose ladders are all vacant (or held by a floor) and that has not
-- run out confers again. Returns how many resumed.
CREATE FUNCTION core.resume_replaced_grants(p_pool bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    org bigint;
    g record;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT organization_id INTO org FROM core.resource_pools WHERE pool_id = p_pool;
    FOR g IN
        SELECT grant_id, product_id FROM core.grants
        WHERE organization_id = org AND status = 'replaced' AND (ends_at IS NULL OR ends_at > now())
        ORDER BY replaced_at DESC, grant_id DESC
    LOOP
        IF core.ladders_free_for(p_pool, g.product_id) THEN
            PERFORM core.confer_grant(g.grant_id);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- Deliver displaced subscriptions (DeliverDisplacedSubscriptionsTx's SQL): under the pool row,
-- each open displacement whose ladders are free again is conferred back as a provision,
-- suspended when its subscription is past due, unpaid or paused. Returns how many delivered.
CREATE FUNCTION core.deliver_displaced_subscriptions(p_pool bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    d record;
    c bigint;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    FOR d IN
        SELECT sd.conferral_id, i.subscription_item_id, i.product_id, i.quantity, s.status
        FROM core.subscription_displacements sd
        JOIN core.conferrals old ON old.conferral_id = sd.conferral_id AND old.pool_id = p_pool
        JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
        JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
        WHERE sd.delivered_at IS NULL AND s.status NOT IN ('canceled', 'incomplete_expired')
        ORDER BY sd.displaced_at DESC, sd.conferral_id DESC
    LOOP
        IF core.ladders_free_for(p_pool, d.product_id) THEN
            c := core.confer(p_pool, d.product_id, NULL, d.subscription_item_id, d.quantity);
            IF d.status IN ('past_due', 'unpaid', 'paused') THEN
                UPDATE core.conferrals SET suspended = true WHERE conferral_id = c;
            END IF;
            UPDATE core.subscription_displacements SET delivered_at = now() WHERE conferral_id = d.conferral_id;
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- The floor (ReapplyDefaultsIfVacant's SQL): when the organization's type has a default ladder
-- with a rank 0 and the pool holds nothing on that ladder, confer rank 0 as a floor grant.
-- Returns the floor grant, or NULL when none was needed.
CREATE FUNCTION core.reapply_defaults_if_vacant(p_pool bigint, p_plan_act bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    org bigint;
    ladder bigint;
    floor_product bigint;
    g bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT o.organization_id, t.default_plan_ladder_id INTO org, ladder
      FROM core.resource_pools rp
      JOIN core.organizations o USING (organization_id)
      LEFT JOIN core.org_types t ON t.org_type_id = o.org_type_id
     WHERE rp.pool_id = p_pool;
    IF ladder IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT product_id INTO floor_product FROM core.plan_ladder_tiers WHERE plan_ladder_id = ladder AND rank = 0;
    IF floor_product IS NULL
       OR EXISTS (SELECT 1 FROM core.positions WHERE pool_id = p_pool AND plan_ladder_id = ladder) THEN
        RETURN NULL;
    END IF;
    INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason, plan_act_id)
    VALUES (org, floor_product, 1, 'floor', 'active', 'the organization type''s default', p_plan_act)
    RETURNING grant_id INTO g;
    PERFORM core.confer_grant(g);
    RETURN g;
END
$$;

-- Grants to the run-time role ------------------------------------------------------------------

GRANT SELECT ON core.resource_keys, core.entitlement_sets, core.entitlement_set_rules, core.products,
    core.plan_ladders, core.plan_ladder_tiers, core.org_types, core.resource_pools, core.grants,
    core.subscriptions, core.subscription_items, core.conferrals, core.positions,
    core.subscription_displacements, core.pool_entitlements, core.numeric_entitlement_usage, core.pool_usage
TO console_runtime;
GRANT INSERT ON core.resource_keys, core.entitlement_sets, core.entitlement_set_rules, core.products,
    core.plan_ladders, core.plan_ladder_tiers, core.org_types, core.resource_pools, core.grants,
    core.subscriptions, core.subscription_items
TO console_runtime;
GRANT UPDATE (provider, description) ON core.resource_keys TO console_runtime;
GRANT UPDATE (name) ON core.entitlement_sets TO console_runtime;
GRANT UPDATE (numeric_value, flag_value), DELETE ON core.entitlement_set_rules TO console_runtime;
GRANT UPDATE (name, entitlement_set_id, published) ON core.products TO console_runtime;
GRANT UPDATE (name, sort_order) ON core.plan_ladders TO console_runtime;
GRANT UPDATE (rank, product_id), DELETE ON core.plan_ladder_tiers TO console_runtime;
GRANT UPDATE (name, default_plan_ladder_id, default_owner_act_id) ON core.org_types TO console_runtime;
GRANT UPDATE (org_type_id) ON core.organizations TO console_runtime;
GRANT UPDATE (status, ends_at, replaced_at, ended_at, organization_id, quantity, starts_at) ON core.grants TO console_runtime;
GRANT UPDATE (status, updated_at) ON core.subscriptions TO console_runtime;
GRANT UPDATE (quantity, product_id) ON core.subscription_items TO console_runtime;
GRANT UPDATE (used, counted_at) ON core.numeric_entitlement_usage TO console_runtime;

GRANT EXECUTE ON FUNCTION core.lock_pool(bigint), core.lock_pools(bigint[]),
    core.confer(bigint, bigint, bigint, bigint, integer, timestamptz, timestamptz),
    core.end_conferral(bigint, text), core.align_conferral_shape(bigint),
    core.update_conferral_bounds(bigint, integer, timestamptz), core.sync_source_status(bigint, text),
    core.compute_entitlements(bigint), core.materialize_pool(bigint), core.ladders_free_for(bigint, bigint),
    core.confer_grant(bigint), core.resume_replaced_grants(bigint), core.deliver_displaced_subscriptions(bigint),
    core.reapply_defaults_if_vacant(bigint, bigint)
TO console_runtime;
REVOKE EXECUTE ON FUNCTION core.displace_conferral(bigint, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION core.lock_pool(bigint), core.lock_pools(bigint[]),
    core.confer(bigint, bigint, bigint, bigint, integer, timestamptz, timestamptz),
    core.end_conferral(bigint, text), core.align_conferral_shape(bigint),
    core.update_conferral_bounds(bigint, integer, timestamptz), core.sync_source_status(bigint, text),
    core.compute_entitlements(bigint), core.materialize_pool(bigint), core.ladders_free_for(bigint, bigint),
    core.confer_grant(bigint), core.resume_replaced_grants(bigint), core.deliver_displaced_subscriptions(bigint),
    core.reapply_defaults_if_vacant(bigint, bigint)
FROM PUBLIC;

RESET ROLE;
