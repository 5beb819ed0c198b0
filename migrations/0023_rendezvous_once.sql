-- Issue 41, the cost of a move: the materialization rendezvous is asserted once per call from
-- outside, not at every level of the work. Each function a move, a rule change's settle or a
-- subscription's resume runs below its entry point asserted the rendezvous again (six checks in a
-- plan act's move, each computing the seal) and ran as SECURITY DEFINER with its own
-- `search_path`, which PostgreSQL saves, sets and restores on every call.
--
-- Each such function F now has a body `core.F_held`: the same statements, without the assertion,
-- SECURITY INVOKER and with no settings of its own, executable by its owner only (PUBLIC's right
-- revoked, none granted), so it runs only from another core function, as `core_owner` with that
-- function's `search_path`. `core.F` keeps its signature, grants and SECURITY DEFINER: it asserts
-- the rendezvous and calls `core.F_held`. A function that asserted the rendezvous first calls the
-- `_held` bodies. No lock changes: every row lock is taken where and in the order it was, the
-- pool row through `core.lock_pool_held` (whose trace note is `core.lock_pool`'s).
SET LOCAL ROLE core_owner;

CREATE FUNCTION core.lock_pool_held(p_pool bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM 1 FROM core.resource_pools WHERE pool_id = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool_not_found' USING ERRCODE = 'MC004', DETAIL = format('pool %s', p_pool);
    END IF;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('PoolRow', p_pool::text, 'FOR UPDATE', p_pool);
    END IF;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.lock_pool_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.lock_pool(p_pool bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.lock_pool_held(p_pool);
END
$function$;

CREATE FUNCTION core.confer_held(p_pool bigint, p_product bigint, p_grant bigint, p_item bigint, p_quantity integer, p_starts timestamp with time zone DEFAULT now(), p_ends timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    c bigint;
    h bigint;
    vacated boolean := false;
BEGIN
    PERFORM core.lock_pool_held(p_pool);
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
        PERFORM core.resume_replaced_grants_held(p_pool);
        PERFORM core.deliver_displaced_subscriptions_held(p_pool);
        PERFORM core.reapply_defaults_if_vacant_held(p_pool);
    END IF;
    RETURN c;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.confer_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.confer(p_pool bigint, p_product bigint, p_grant bigint, p_item bigint, p_quantity integer, p_starts timestamp with time zone DEFAULT now(), p_ends timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    RETURN core.confer_held(p_pool, p_product, p_grant, p_item, p_quantity, p_starts, p_ends);
END
$function$;

CREATE FUNCTION core.end_conferral_held(p_conferral bigint, p_reason text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    p bigint;
    g bigint;
BEGIN
    SELECT pool_id, grant_id INTO p, g FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN false;
    END IF;
    PERFORM core.lock_pool_held(p);
    DELETE FROM core.positions WHERE conferral_id = p_conferral;
    UPDATE core.conferrals SET state = 'ended', ended_reason = p_reason, ended_at = now()
     WHERE conferral_id = p_conferral AND state = 'holding';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF g IS NOT NULL THEN
        UPDATE core.grants SET status = 'ended', ended_at = now() WHERE grant_id = g AND status = 'active';
    END IF;
    RETURN true;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.end_conferral_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.end_conferral(p_conferral bigint, p_reason text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    RETURN core.end_conferral_held(p_conferral, p_reason);
END
$function$;

CREATE FUNCTION core.materialize_pool_held(p_pool bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM core.lock_pool_held(p_pool);
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
$function$;
REVOKE EXECUTE ON FUNCTION core.materialize_pool_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.materialize_pool(p_pool bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.materialize_pool_held(p_pool);
END
$function$;

CREATE FUNCTION core.confer_grant_held(p_grant bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    g core.grants%ROWTYPE;
    p bigint;
    c bigint;
BEGIN
    SELECT * INTO g FROM core.grants WHERE grant_id = p_grant;
    SELECT pool_id INTO p FROM core.resource_pools WHERE organization_id = g.organization_id AND is_default;
    IF p IS NULL THEN
        RETURN NULL;
    END IF;
    c := core.confer_held(p, g.product_id, g.grant_id, NULL, g.quantity, g.starts_at, g.ends_at);
    IF g.status <> 'active' OR g.replaced_at IS NOT NULL THEN
        UPDATE core.grants SET status = 'active', replaced_at = NULL WHERE grant_id = p_grant;
    END IF;
    RETURN c;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.confer_grant_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.confer_grant(p_grant bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    RETURN core.confer_grant_held(p_grant);
END
$function$;

CREATE FUNCTION core.reapply_defaults_if_vacant_held(p_pool bigint, p_plan_act bigint DEFAULT NULL::bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    org bigint;
    ladder bigint;
    floor_product bigint;
    g bigint;
BEGIN
    PERFORM core.lock_pool_held(p_pool);
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
    PERFORM core.confer_grant_held(g);
    RETURN g;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.reapply_defaults_if_vacant_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.reapply_defaults_if_vacant(p_pool bigint, p_plan_act bigint DEFAULT NULL::bigint)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    RETURN core.reapply_defaults_if_vacant_held(p_pool, p_plan_act);
END
$function$;

CREATE FUNCTION core.resume_replaced_grants_held(p_pool bigint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    org bigint;
    g record;
    n integer := 0;
BEGIN
    PERFORM core.lock_pool_held(p_pool);
    SELECT organization_id INTO org FROM core.resource_pools WHERE pool_id = p_pool;
    FOR g IN
        SELECT grant_id, product_id FROM core.grants
        WHERE organization_id = org AND status = 'replaced' AND (ends_at IS NULL OR ends_at > now())
        ORDER BY replaced_at DESC, grant_id DESC
    LOOP
        IF core.ladders_free_for(p_pool, g.product_id) THEN
            PERFORM core.confer_grant_held(g.grant_id);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.resume_replaced_grants_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.resume_replaced_grants(p_pool bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    RETURN core.resume_replaced_grants_held(p_pool);
END
$function$;

CREATE FUNCTION core.deliver_displaced_subscriptions_held(p_pool bigint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    d record;
    c bigint;
    n integer := 0;
BEGIN
    PERFORM core.lock_pool_held(p_pool);
    FOR d IN
        SELECT sd.conferral_id, i.subscription_item_id, i.product_id, i.quantity, s.status
        FROM core.subscription_displacements sd
        JOIN core.conferrals old ON old.conferral_id = sd.conferral_id AND old.pool_id = p_pool
        JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
        JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
        WHERE sd.delivered_at IS NULL AND i.removed_at IS NULL
          AND s.status NOT IN ('canceled', 'incomplete_expired', 'incomplete')
        ORDER BY sd.displaced_at DESC, sd.conferral_id DESC
    LOOP
        IF core.ladders_free_for(p_pool, d.product_id) THEN
            c := core.confer_held(p_pool, d.product_id, NULL, d.subscription_item_id, d.quantity);
            IF d.status IN ('past_due', 'unpaid', 'paused') THEN
                UPDATE core.conferrals SET suspended = true WHERE conferral_id = c;
            END IF;
            UPDATE core.subscription_displacements SET delivered_at = now() WHERE conferral_id = d.conferral_id;
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$function$;
REVOKE EXECUTE ON FUNCTION core.deliver_displaced_subscriptions_held FROM PUBLIC;

CREATE OR REPLACE FUNCTION core.deliver_displaced_subscriptions(p_pool bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
BEGIN
    PERFORM core.assert_rendezvous();
    RETURN core.deliver_displaced_subscriptions_held(p_pool);
END
$function$;

CREATE OR REPLACE FUNCTION core.enact_plan_act_obligation(p_act bigint, p_pool bigint)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
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
    PERFORM core.lock_pool_held(p_pool);
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
            PERFORM core.reapply_defaults_if_vacant_held(p_pool, p_act);
            settled := 'vacant';
        ELSIF disp = 'grandfather' THEN
            -- The incumbent keeps its old floor, as a legacy grant of the same product.
            PERFORM core.end_conferral_held(fl.conferral_id, 'grandfathered');
            SELECT organization_id INTO org FROM core.resource_pools WHERE pool_id = p_pool;
            why := format('grandfathered by plan act #%s (was floor grant #%s)', p_act, fl.grant_id);
            INSERT INTO core.grants (organization_id, product_id, quantity, kind, status, reason, plan_act_id)
            VALUES (org, fl.product_id, 1, 'legacy', 'active', why, p_act)
            RETURNING grant_id INTO legacy;
            INSERT INTO core.grant_events (grant_id, organization_id, act, reason, detail)
            VALUES (legacy, org, 'grandfathered', why, jsonb_build_object('plan_act_id', p_act));
            PERFORM core.confer_grant_held(legacy);
            PERFORM core.reapply_defaults_if_vacant_held(p_pool, p_act);
            settled := 'grandfathered';
        ELSE
            -- No resumption: a floor displaces nothing, and what a floor held was free for any
            -- replaced grant or displaced subscription all along (core.ladders_free_for).
            PERFORM core.end_conferral_held(fl.conferral_id, 'migrated');
            PERFORM core.reapply_defaults_if_vacant_held(p_pool, p_act);
            settled := 'migrated';
        END IF;
        PERFORM core.materialize_pool_held(p_pool);
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
$function$;

CREATE OR REPLACE FUNCTION core.settle_change_pool(p_change bigint, p_pool bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
DECLARE
    owed bigint[];
    v_act bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool_held(p_pool);
    SELECT array_agg(o.act_id ORDER BY x.position) INTO owed
      FROM core.entitlement_set_change_obligations o
      JOIN core.entitlement_set_change_acts x ON x.act_id = o.act_id
     WHERE x.change_id = p_change AND o.pool_id = p_pool AND o.state <> 'settled';
    IF owed IS NULL THEN
        RETURN false;
    END IF;
    -- The owed rows FOR UPDATE in act_id order before the UPDATE (issue 36, defect 6): an
    -- operator's Retry (bring_failed_forward) locks failed rows in (pool_id, act_id) order, and a
    -- bare UPDATE would take them in whatever order it meets them, so the two could deadlock.
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        FOR v_act IN SELECT o.act_id FROM core.entitlement_set_change_obligations o
                      WHERE o.act_id = ANY (owed) AND o.pool_id = p_pool AND o.state <> 'settled'
                      ORDER BY o.act_id FOR UPDATE LOOP
            PERFORM core.note_lock('ChangeObligationRow', v_act::text || ',' || p_pool::text, 'FOR UPDATE',
                                   p_pool * 1000000000 + v_act);
        END LOOP;
    ELSE
        PERFORM 1 FROM core.entitlement_set_change_obligations o
          WHERE o.act_id = ANY (owed) AND o.pool_id = p_pool AND o.state <> 'settled'
          ORDER BY o.act_id FOR UPDATE;
    END IF;
    PERFORM core.materialize_pool_held(p_pool);
    -- Every owed act of the pool settles in one statement (what core.settle_obligation does per
    -- act, without a round of statements each): the pool row is held, so no other pass can be
    -- settling or failing these rows, and they are all this one pool's.
    UPDATE core.entitlement_set_change_obligations
       SET state = 'settled', settled_at = now(), attempts = attempts + 1, next_attempt_at = NULL
     WHERE act_id = ANY (owed) AND pool_id = p_pool AND state <> 'settled';
    RETURN true;
END
$function$;

CREATE OR REPLACE FUNCTION core.resume_subscription(p_pool bigint, p_subscription bigint)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
DECLARE
    d record;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool_held(p_pool);
    FOR d IN
        SELECT sd.conferral_id, i.subscription_item_id, i.product_id, i.quantity
        FROM core.subscription_displacements sd
        JOIN core.conferrals old ON old.conferral_id = sd.conferral_id AND old.pool_id = p_pool
        JOIN core.conferrals by_c ON by_c.conferral_id = sd.displaced_by AND by_c.state = 'holding'
        JOIN core.subscription_items i ON i.subscription_item_id = sd.subscription_item_id
        WHERE i.subscription_id = p_subscription AND sd.delivered_at IS NULL AND i.removed_at IS NULL
        ORDER BY sd.conferral_id
    LOOP
        UPDATE core.subscription_displacements SET delivered_at = now() WHERE conferral_id = d.conferral_id;
        PERFORM core.confer_held(p_pool, d.product_id, NULL, d.subscription_item_id, d.quantity);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$function$;

CREATE OR REPLACE FUNCTION core.align_conferral_shape(p_conferral bigint)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
DECLARE
    c core.conferrals%ROWTYPE;
    h bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO c FROM core.conferrals WHERE conferral_id = p_conferral;
    IF c.conferral_id IS NULL OR c.state <> 'holding' THEN
        RETURN;
    END IF;
    PERFORM core.lock_pool_held(c.pool_id);
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
$function$;

CREATE OR REPLACE FUNCTION core.update_conferral_bounds(p_conferral bigint, p_quantity integer, p_ends timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
DECLARE
    p bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT pool_id INTO p FROM core.conferrals WHERE conferral_id = p_conferral;
    IF p IS NULL THEN
        RETURN;
    END IF;
    PERFORM core.lock_pool_held(p);
    UPDATE core.conferrals SET quantity = p_quantity, ends_at = p_ends
     WHERE conferral_id = p_conferral AND state = 'holding';
END
$function$;

CREATE OR REPLACE FUNCTION core.settle_obligation(p_act bigint, p_pool bigint, p_error text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'core', 'pg_temp'
AS $function$
DECLARE
    st text;
    tries integer;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool_held(p_pool);
    SELECT o.state, o.attempts INTO st, tries
      FROM core.entitlement_set_change_obligations o
     WHERE o.act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE;
    IF st IS NOT NULL AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('ChangeObligationRow', p_act::text || ',' || p_pool::text, 'FOR UPDATE',
                                p_pool * 1000000000 + p_act);
    END IF;
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
$function$;

RESET ROLE;
