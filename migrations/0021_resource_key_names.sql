-- Issue 39, words a member understands: each resource key has a display name, and a numeric key
-- may have a unit, which the member's pages show in place of the key ("Active sites: 10",
-- "Storage: 5 GB"). An operator names each key once, in the catalog (docs/domain.md).
SET LOCAL ROLE core_owner;

-- The name a key gets until an operator names it: the key's last word, `_` read as a space,
-- the first letter upper-cased (`fedwiki.active_sites` → "Active sites").
CREATE FUNCTION core.default_resource_key_name(p_key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT upper(left(w, 1)) || substr(w, 2)
    FROM (SELECT replace(substring(p_key FROM '[^.]+$'), '_', ' ') AS w) x
$$;

-- Both are plain columns, no key of the row: a label's UPDATE takes the row FOR NO KEY UPDATE,
-- which does not wait on the FOR KEY SHARE an entitlement or rule insert holds through its
-- foreign key (docs/database-locks.md, "Rename a resource key").
ALTER TABLE core.resource_keys
    ADD COLUMN display_name text,
    -- Shown after a number as written ("GB", "seats"); none when the name says it already.
    ADD COLUMN unit text;

UPDATE core.resource_keys SET display_name = core.default_resource_key_name(resource_key);
-- The keys the console provides, where the key's last word alone reads poorly.
UPDATE core.resource_keys SET display_name = 'Priority support' WHERE resource_key = 'support.priority';

ALTER TABLE core.resource_keys
    ALTER COLUMN display_name SET NOT NULL,
    ADD CONSTRAINT resource_keys_display_name_check
        CHECK (display_name = btrim(display_name) AND length(display_name) BETWEEN 1 AND 100),
    ADD CONSTRAINT resource_keys_unit_check
        CHECK (unit IS NULL OR (unit = btrim(unit) AND length(unit) BETWEEN 1 AND 20)),
    ADD CONSTRAINT resource_keys_unit_numeric_only CHECK (unit IS NULL OR kind = 'numeric');

-- A key created without a name (RegisterProviders, the catalog's add form) gets the default one.
CREATE FUNCTION core.name_new_resource_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.display_name IS NULL THEN
        NEW.display_name := core.default_resource_key_name(NEW.resource_key);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER resource_keys_default_name BEFORE INSERT ON core.resource_keys
    FOR EACH ROW EXECUTE FUNCTION core.name_new_resource_key();

GRANT UPDATE (display_name, unit) ON core.resource_keys TO console_runtime;

-- The member's home (and the billing page, which reads it) carries, per organization, the name
-- and unit of each key its entitlements and usage show: the page never shows a key. Otherwise
-- as in 0001.
CREATE OR REPLACE FUNCTION core.member_home(p_account bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_displaced jsonb := '{}';
BEGIN
    -- Live subscriptions another plan displaced (Resume plan brings them back), with what
    -- displaced them, per organization: read only when one of the member's organizations has a
    -- live subscription.
    IF EXISTS (SELECT 1 FROM core.organization_members m
               JOIN core.subscriptions s ON s.organization_id = m.organization_id
               WHERE m.account_id = p_account AND s.status IN ('active', 'trialing')) THEN
        v_displaced := (
            SELECT coalesce(jsonb_object_agg(x.organization_id::text, x.lines), '{}')
            FROM (
                SELECT s.organization_id, json_agg(json_build_object(
                    'subscription_id', s.subscription_id, 'product', ip.name, 'by', bp.name,
                    'granted', by_c.grant_id IS NOT NULL, 'until', coalesce(g.ends_at, by_c.ends_at)) ORDER BY s.subscription_id, i.subscription_item_id) AS lines
                FROM core.subscriptions s
                JOIN core.subscription_items i ON i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                JOIN core.subscription_displacements sd
                  ON sd.subscription_item_id = i.subscription_item_id AND sd.delivered_at IS NULL
                JOIN core.conferrals by_c ON by_c.conferral_id = sd.displaced_by AND by_c.state = 'holding'
                JOIN core.products ip ON ip.product_id = i.product_id
                JOIN core.products bp ON bp.product_id = by_c.product_id
                LEFT JOIN core.grants g ON g.grant_id = by_c.grant_id
                JOIN core.organization_members m ON m.organization_id = s.organization_id
                WHERE m.account_id = p_account AND s.status IN ('active', 'trialing')
                GROUP BY s.organization_id) x);
    END IF;
    RETURN array_to_json(ARRAY(
        SELECT json_build_object(
            'membership', json_build_object('organization_id', o.organization_id, 'name', o.name, 'role', m.role),
            'held', array_to_json(ARRAY(
                SELECT h
                -- The grant's kind and the Stripe ids by primary key, as scalar sub-selects: a
                -- nested loop apiece less to start than the LEFT JOINs they replace.
                FROM (SELECT c.conferral_id, l.name AS ladder, ps.rank, p.name AS product, c.grant_id,
                             (SELECT g.kind FROM core.grants g WHERE g.grant_id = c.grant_id) AS grant_kind,
                             (SELECT s.stripe_subscription_id FROM core.subscription_items i
                                JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
                               WHERE i.subscription_item_id = c.subscription_item_id) AS stripe_subscription_id,
                             (SELECT i.stripe_item_id FROM core.subscription_items i
                               WHERE i.subscription_item_id = c.subscription_item_id) AS stripe_item_id,
                             c.suspended, c.quantity, l.sort_order, l.plan_ladder_id
                      FROM core.conferrals c
                      JOIN core.products p ON p.product_id = c.product_id
                      LEFT JOIN core.positions ps ON ps.conferral_id = c.conferral_id
                      LEFT JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
                      WHERE c.pool_id = rp.pool_id AND c.state = 'holding') h
                ORDER BY h.sort_order NULLS LAST, h.plan_ladder_id, h.conferral_id)),
            'entitlements', array_to_json(ARRAY(
                SELECT e
                FROM (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements
                      WHERE pool_id = rp.pool_id) e
                ORDER BY e.resource_key COLLATE "C")),
            'usage', array_to_json(ARRAY(
                SELECT u
                FROM (SELECT resource_key, used, limit_value FROM core.pool_usage WHERE pool_id = rp.pool_id) u
                ORDER BY u.resource_key COLLATE "C")),
            'labels', array_to_json(ARRAY(
                SELECT k
                FROM (SELECT r.resource_key, r.display_name AS name, r.unit FROM core.resource_keys r
                      WHERE r.resource_key IN (SELECT resource_key FROM core.pool_entitlements WHERE pool_id = rp.pool_id
                                               UNION
                                               SELECT resource_key FROM core.numeric_entitlement_usage WHERE pool_id = rp.pool_id)) k
                ORDER BY k.resource_key COLLATE "C")),
            'displaced', coalesce(v_displaced -> o.organization_id::text, '[]'::jsonb))
        FROM core.organization_members m
        JOIN core.organizations o ON o.organization_id = m.organization_id
        LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        WHERE m.account_id = p_account
        ORDER BY o.name, o.organization_id))::text;
END
$$;
REVOKE EXECUTE ON FUNCTION core.member_home(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_home(bigint) TO console_runtime;

RESET ROLE;
