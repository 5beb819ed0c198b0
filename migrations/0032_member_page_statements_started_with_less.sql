-- The member pages' statements, started with less again.
-- - The documents are built without aggregate nodes. A profile of PostgreSQL under the home
--   page's load put a sixth of the backend's time in ExecInitAgg: every json_agg(... ORDER BY
--   ...) is an Aggregate node whose start (its transition expressions, its sort) costs more than
--   the one to five rows it gathers, and each page started four to nine of them. An
--   ARRAY(SELECT ... ORDER BY ...) sub-select gathers the same rows in the same order without
--   one, and array_to_json writes them as json_agg did (an empty ARRAY gives [], so no coalesce).
--   Same documents (as JSON values), volatility, owners and grants.
-- - The session is read by core.live_session, a SQL function PostgreSQL inlines into the page's
--   statement (a set-returning plpgsql function runs as a call of its own, with its own
--   statement, for a fifth of a page's time); it says whether the last-seen time is due to
--   move, and the console moves it with a statement of its own when it is, once a minute at
--   most. core.resume_session stays for consoles of the earlier build while replicas are
--   upgraded.
-- Reads only, no lock changes.
SET LOCAL ROLE core_owner;

-- Inlined into the caller's statement: SQL, one SELECT, STABLE, not STRICT, no SET clause, not
-- SECURITY DEFINER (the caller's own grants on the two tables apply, as they did to
-- resume_session).
CREATE FUNCTION core.live_session(p_token text, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean, touch_due boolean)
LANGUAGE sql STABLE AS $$
    SELECT a.account_id, a.email, a.is_operator, w.last_seen_at < now() - p_touch_every
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = sha256(convert_to(p_token, 'UTF8')) AND w.expires_at > now() AND w.ends_at > now()
$$;
REVOKE EXECUTE ON FUNCTION core.live_session(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.live_session(text, interval) TO console_runtime;

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
            'displaced', coalesce(v_displaced -> o.organization_id::text, '[]'::jsonb))
        FROM core.organization_members m
        JOIN core.organizations o ON o.organization_id = m.organization_id
        LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        WHERE m.account_id = p_account
        ORDER BY o.name, o.organization_id))::text;
END
$$;

CREATE OR REPLACE FUNCTION core.member_billing(p_account bigint, p_invoices integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    orgs bigint[];
    v_subscriptions json := '[]';
    v_invoices json := '[]';
    v_on_sale json := '[]';
BEGIN
    orgs := ARRAY(SELECT organization_id FROM core.organization_members WHERE account_id = p_account);
    -- Each part's query only when it has something to read: most members have no subscription
    -- or invoice, and starting these queries' plans costs more than running them.
    IF EXISTS (SELECT 1 FROM core.subscriptions WHERE organization_id = ANY (orgs)) THEN
        v_subscriptions := array_to_json(ARRAY(
            SELECT x
            FROM (SELECT s.subscription_id, s.organization_id, s.stripe_subscription_id, s.status,
                         s.current_period_end, s.cancel_at_period_end, s.collection_paused, s.ended_at,
                         (s.status IN ('canceled', 'incomplete_expired')) AS ended_rank,
                         ARRAY(SELECT p.name FROM core.subscription_items i JOIN core.products p USING (product_id)
                                WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                                ORDER BY i.subscription_item_id) AS products,
                         ARRAY(SELECT DISTINCT l.name FROM core.subscription_items i
                                 JOIN core.plan_ladder_tiers t ON t.product_id = i.product_id
                                 JOIN core.plan_ladders l USING (plan_ladder_id)
                                WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL) AS ladders,
                         array_to_json(ARRAY(
                             SELECT json_build_object(
                                        'ladder_id', l.plan_ladder_id, 'ladder', l.name, 'product', p.name,
                                        'rank', t.rank, 'interval', pr.billing_interval, 'currency', pr.currency,
                                        'price_id', pr.price_id, 'quantity', i.quantity,
                                        'max_quantity', p.max_quantity)
                             FROM core.subscription_items i
                             JOIN core.products p USING (product_id)
                             JOIN core.plan_ladder_tiers t ON t.product_id = i.product_id
                             JOIN core.plan_ladders l ON l.plan_ladder_id = t.plan_ladder_id
                             LEFT JOIN billing.prices pr ON pr.stripe_price_id = i.stripe_price_id
                             WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                             ORDER BY l.sort_order, l.plan_ladder_id)) AS items,
                         array_to_json(ARRAY(
                             SELECT json_build_object(
                                        'ladder_id', c.plan_ladder_id, 'from', f.name, 'to', tp.name,
                                        'effective_at', c.effective_at)
                             FROM core.scheduled_changes c
                             JOIN core.products f ON f.product_id = c.from_product_id
                             JOIN core.products tp ON tp.product_id = c.to_product_id
                             WHERE c.subscription_id = s.subscription_id AND c.state = 'scheduled'
                             ORDER BY c.plan_ladder_id)) AS scheduled
                  FROM core.subscriptions s WHERE s.organization_id = ANY (orgs)) x
            ORDER BY x.organization_id, x.ended_rank, x.subscription_id DESC));
    END IF;
    IF EXISTS (SELECT 1 FROM billing.invoices WHERE organization_id = ANY (orgs)) THEN
        v_invoices := array_to_json(ARRAY(
            SELECT x
            FROM (SELECT i.organization_id, i.stripe_invoice_id, i.number, i.status, i.currency, i.amount_due,
                         i.amount_remaining, i.hosted_invoice_url, i.stripe_created
                  FROM unnest(orgs) AS o(id)
                  CROSS JOIN LATERAL (
                      SELECT * FROM billing.invoices WHERE organization_id = o.id
                      ORDER BY stripe_created DESC, stripe_invoice_id DESC LIMIT p_invoices) i) x
            ORDER BY x.organization_id, x.stripe_created DESC, x.stripe_invoice_id DESC));
    END IF;
    IF cardinality(orgs) > 0 THEN
        v_on_sale := array_to_json(ARRAY(
            SELECT x
            FROM (SELECT l.name AS ladder, t.rank, t.product_id, p.name AS product, pr.price_id, pr.billing_interval,
                         pr.amount_minor, pr.currency, l.sort_order, l.plan_ladder_id, p.max_quantity
                  FROM core.plan_ladder_tiers t
                  JOIN core.plan_ladders l USING (plan_ladder_id)
                  JOIN core.products p ON p.product_id = t.product_id
                  JOIN billing.prices pr ON pr.product_id = t.product_id
                  WHERE t.rank > 0 AND p.published AND pr.active AND pr.sync_state = 'synced'
                    AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false) x
            ORDER BY x.sort_order, x.plan_ladder_id, x.rank, x.billing_interval, x.currency, x.price_id));
    END IF;
    RETURN json_build_object('home', core.member_home(p_account)::json, 'subscriptions', v_subscriptions,
                             'invoices', v_invoices, 'on_sale', v_on_sale)::text;
END
$$;

CREATE OR REPLACE FUNCTION fedwiki.member_sites(p_account bigint, p_requests integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN array_to_json(ARRAY(
        SELECT json_build_object(
            'organization_id', o.organization_id,
            'name', o.name,
            'sites', array_to_json(ARRAY(
                SELECT json_build_object(
                    'site_id', s.site_id, 'workspace_id', s.workspace_id, 'domain', s.domain, 'status', s.status,
                    'keep_active', s.keep_active, 'storage_bytes', s.storage_bytes, 'modified_at', s.modified_at,
                    'created_at', s.created_at, 'parked_by_sweep', s.parked_by_sweep,
                    'status_changed_at', s.status_changed_at)
                FROM fedwiki.sites s WHERE s.workspace_id = 'org-' || o.organization_id
                ORDER BY s.domain)),
            'requests', array_to_json(ARRAY(
                SELECT json_build_object(
                    'request_id', r.request_id, 'instance_id', r.instance_id, 'generation', r.generation,
                    'workspace_id', r.workspace_id, 'domain', r.domain, 'kind', r.kind, 'swap_of', r.swap_of,
                    'state', r.state, 'outcome', r.outcome, 'starts_as', r.starts_as, 'created_at', r.created_at,
                    'updated_at', r.updated_at)
                FROM fedwiki.lifecycle_requests r
                WHERE r.workspace_id = 'org-' || o.organization_id
                ORDER BY r.request_id DESC LIMIT p_requests)),
            'used', coalesce(u.used, 0),
            'limit', coalesce(e.numeric_value, 0),
            'custom_domain', coalesce(d.flag_value, false),
            'domains', array_to_json(ARRAY(
                SELECT c.name FROM domains.claims c
                 WHERE c.owner = 'workspace:org-' || o.organization_id ORDER BY c.name)),
            'placements', array_to_json(ARRAY(
                SELECT json_build_array(pl.hostname, pl.object_id) FROM domains.placements pl
                 WHERE pl.owner = 'workspace:org-' || o.organization_id ORDER BY pl.hostname)),
            'last_swap_at', (SELECT sp.last_swap_at FROM fedwiki.swap_policies sp
                              WHERE sp.workspace_id = 'org-' || o.organization_id))
        FROM core.organization_members m
        JOIN core.organizations o USING (organization_id)
        LEFT JOIN core.resource_pools p ON p.organization_id = o.organization_id AND p.is_default
        LEFT JOIN core.numeric_entitlement_usage u ON u.pool_id = p.pool_id AND u.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements d ON d.pool_id = p.pool_id AND d.resource_key = 'fedwiki.custom_domain'
        WHERE m.account_id = p_account
        ORDER BY o.name, o.organization_id))::text;
END
$$;

RESET ROLE;
