-- The member pages' statements, started with less: most of a member page's time in PostgreSQL
-- was spent starting the plans of queries that read nothing (a profile of the home under load:
-- a third of the backend's time in ExecutorStart, for one organization with one plan line).
-- - The session's resume returns its row with RETURN NEXT instead of a RETURN QUERY statement.
-- - The home reads displaced subscriptions (a seven-table query) only when one of the member's
--   organizations has a live subscription, into a map the organizations' lines read from.
-- - The billing page reads subscriptions and invoices only when the member's organizations have
--   any, and what is on sale only for a member of an organization.
-- Same documents, same owners and grants; reads only, no lock changes.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION core.resume_session(p_token text, p_idle interval, p_touch_every interval)
RETURNS TABLE (account_id bigint, email text, is_operator boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s record;
BEGIN
    SELECT w.token_hash, w.last_seen_at, w.ends_at, a.account_id AS id, a.email AS mail, a.is_operator AS op
    INTO s
    FROM core.web_sessions w JOIN core.accounts a ON a.account_id = w.account_id
    WHERE w.token_hash = sha256(convert_to(p_token, 'UTF8')) AND w.expires_at > now() AND w.ends_at > now();
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF s.last_seen_at < now() - p_touch_every THEN
        UPDATE core.web_sessions w
        SET last_seen_at = now(), expires_at = least(now() + p_idle, s.ends_at)
        WHERE w.token_hash = s.token_hash;
    END IF;
    account_id := s.id;
    email := s.mail;
    is_operator := s.op;
    RETURN NEXT;
END
$$;

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
    RETURN (
        SELECT coalesce(json_agg(json_build_object(
            'membership', json_build_object('organization_id', o.organization_id, 'name', o.name, 'role', m.role),
            'held', coalesce((
                SELECT json_agg(h ORDER BY h.sort_order NULLS LAST, h.plan_ladder_id, h.conferral_id)
                FROM (SELECT c.conferral_id, l.name AS ladder, ps.rank, p.name AS product, c.grant_id,
                             g.kind AS grant_kind, s.stripe_subscription_id, i.stripe_item_id, c.suspended,
                             c.quantity, l.sort_order, l.plan_ladder_id
                      FROM core.conferrals c
                      JOIN core.products p ON p.product_id = c.product_id
                      LEFT JOIN core.positions ps ON ps.conferral_id = c.conferral_id
                      LEFT JOIN core.plan_ladders l ON l.plan_ladder_id = ps.plan_ladder_id
                      LEFT JOIN core.grants g ON g.grant_id = c.grant_id
                      LEFT JOIN core.subscription_items i ON i.subscription_item_id = c.subscription_item_id
                      LEFT JOIN core.subscriptions s ON s.subscription_id = i.subscription_id
                      WHERE c.pool_id = rp.pool_id AND c.state = 'holding') h), '[]'),
            'entitlements', coalesce((
                SELECT json_agg(e ORDER BY e.resource_key COLLATE "C")
                FROM (SELECT resource_key, numeric_value, flag_value FROM core.pool_entitlements
                      WHERE pool_id = rp.pool_id) e), '[]'),
            'usage', coalesce((
                SELECT json_agg(u ORDER BY u.resource_key COLLATE "C")
                FROM (SELECT resource_key, used, limit_value FROM core.pool_usage WHERE pool_id = rp.pool_id) u), '[]'),
            'displaced', coalesce(v_displaced -> o.organization_id::text, '[]'::jsonb)
          ) ORDER BY o.name, o.organization_id), '[]')::text
        FROM core.organization_members m
        JOIN core.organizations o ON o.organization_id = m.organization_id
        LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        WHERE m.account_id = p_account);
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
        v_subscriptions := coalesce((
            SELECT json_agg(x ORDER BY x.organization_id, x.ended_rank, x.subscription_id DESC)
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
                         coalesce((SELECT json_agg(json_build_object(
                                              'ladder_id', l.plan_ladder_id, 'ladder', l.name, 'product', p.name,
                                              'rank', t.rank, 'interval', pr.billing_interval, 'currency', pr.currency,
                                              'price_id', pr.price_id, 'quantity', i.quantity,
                                              'max_quantity', p.max_quantity)
                                          ORDER BY l.sort_order, l.plan_ladder_id)
                                   FROM core.subscription_items i
                                   JOIN core.products p USING (product_id)
                                   JOIN core.plan_ladder_tiers t ON t.product_id = i.product_id
                                   JOIN core.plan_ladders l ON l.plan_ladder_id = t.plan_ladder_id
                                   LEFT JOIN billing.prices pr ON pr.stripe_price_id = i.stripe_price_id
                                   WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL), '[]') AS items,
                         coalesce((SELECT json_agg(json_build_object(
                                              'ladder_id', c.plan_ladder_id, 'from', f.name, 'to', tp.name,
                                              'effective_at', c.effective_at)
                                          ORDER BY c.plan_ladder_id)
                                   FROM core.scheduled_changes c
                                   JOIN core.products f ON f.product_id = c.from_product_id
                                   JOIN core.products tp ON tp.product_id = c.to_product_id
                                   WHERE c.subscription_id = s.subscription_id AND c.state = 'scheduled'), '[]')
                             AS scheduled
                  FROM core.subscriptions s WHERE s.organization_id = ANY (orgs)) x), '[]');
    END IF;
    IF EXISTS (SELECT 1 FROM billing.invoices WHERE organization_id = ANY (orgs)) THEN
        v_invoices := coalesce((
            SELECT json_agg(x ORDER BY x.organization_id, x.stripe_created DESC, x.stripe_invoice_id DESC)
            FROM (SELECT i.organization_id, i.stripe_invoice_id, i.number, i.status, i.currency, i.amount_due,
                         i.amount_remaining, i.hosted_invoice_url, i.stripe_created
                  FROM unnest(orgs) AS o(id)
                  CROSS JOIN LATERAL (
                      SELECT * FROM billing.invoices WHERE organization_id = o.id
                      ORDER BY stripe_created DESC, stripe_invoice_id DESC LIMIT p_invoices) i) x), '[]');
    END IF;
    IF cardinality(orgs) > 0 THEN
        v_on_sale := coalesce((
            SELECT json_agg(x ORDER BY x.sort_order, x.plan_ladder_id, x.rank, x.billing_interval, x.currency, x.price_id)
            FROM (SELECT l.name AS ladder, t.rank, t.product_id, p.name AS product, pr.price_id, pr.billing_interval,
                         pr.amount_minor, pr.currency, l.sort_order, l.plan_ladder_id, p.max_quantity
                  FROM core.plan_ladder_tiers t
                  JOIN core.plan_ladders l USING (plan_ladder_id)
                  JOIN core.products p ON p.product_id = t.product_id
                  JOIN billing.prices pr ON pr.product_id = t.product_id
                  WHERE t.rank > 0 AND p.published AND pr.active AND pr.sync_state = 'synced'
                    AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false) x), '[]');
    END IF;
    RETURN json_build_object('home', core.member_home(p_account)::json, 'subscriptions', v_subscriptions,
                             'invoices', v_invoices, 'on_sale', v_on_sale)::text;
END
$$;

RESET ROLE;
