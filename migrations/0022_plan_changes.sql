-- Billing II's member page: each subscription's items (ladder, tier, the price's interval and
-- currency, which a switch keeps) and the changes scheduled ahead ("Pro until 31 Dec, then
-- Basic"), in the same one statement as before (0020); each organization's displaced subscriptions
-- in the home's document; ResumeSubscription's function. And the switch quotes: what a member was
-- shown before confirming a switch (the moment an upgrade prorates for, the amount), kept by the
-- console so the confirmation carries only the quote's id and cannot name another moment.
SET LOCAL ROLE core_owner;

-- Whether the subscription's collection pause is the console's own (displaced on every ladder),
-- as its last reconcile read it; a pause made in Stripe's dashboard is not.
ALTER TABLE core.subscriptions ADD COLUMN console_paused boolean NOT NULL DEFAULT false;
GRANT UPDATE (console_paused) ON core.subscriptions TO console_runtime;

CREATE TABLE billing.switch_quotes (
    operation text PRIMARY KEY CHECK (operation ~ '^[0-9a-f]{32}$'),
    subscription_id bigint NOT NULL REFERENCES core.subscriptions ON DELETE CASCADE,
    price_id bigint NOT NULL REFERENCES billing.prices,
    account_id bigint NOT NULL REFERENCES core.accounts ON DELETE CASCADE,
    -- The moment an upgrade's proration is computed for, as Stripe's preview chose it.
    proration_date timestamptz,
    amount_due bigint,
    currency text,
    quoted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX switch_quotes_subscription ON billing.switch_quotes (subscription_id, quoted_at);
GRANT SELECT, INSERT, DELETE ON billing.switch_quotes TO console_runtime;

CREATE OR REPLACE FUNCTION core.member_billing(p_account bigint, p_invoices integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    orgs bigint[];
BEGIN
    orgs := ARRAY(SELECT organization_id FROM core.organization_members WHERE account_id = p_account);
    RETURN json_build_object(
        'home', core.member_home(p_account)::json,
        'subscriptions', coalesce((
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
                                              'rank', t.rank, 'interval', pr.billing_interval, 'currency', pr.currency)
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
                  FROM core.subscriptions s WHERE s.organization_id = ANY (orgs)) x), '[]'),
        'invoices', coalesce((
            SELECT json_agg(x ORDER BY x.organization_id, x.stripe_created DESC, x.stripe_invoice_id DESC)
            FROM (SELECT i.organization_id, i.stripe_invoice_id, i.number, i.status, i.currency, i.amount_due,
                         i.amount_remaining, i.hosted_invoice_url, i.stripe_created
                  FROM unnest(orgs) AS o(id)
                  CROSS JOIN LATERAL (
                      SELECT * FROM billing.invoices WHERE organization_id = o.id
                      ORDER BY stripe_created DESC, stripe_invoice_id DESC LIMIT p_invoices) i) x), '[]'),
        'on_sale', CASE WHEN cardinality(orgs) = 0 THEN '[]'::json ELSE coalesce((
            SELECT json_agg(x ORDER BY x.sort_order, x.plan_ladder_id, x.rank, x.billing_interval, x.currency, x.price_id)
            FROM (SELECT l.name AS ladder, t.rank, t.product_id, p.name AS product, pr.price_id, pr.billing_interval,
                         pr.amount_minor, pr.currency, l.sort_order, l.plan_ladder_id
                  FROM core.plan_ladder_tiers t
                  JOIN core.plan_ladders l USING (plan_ladder_id)
                  JOIN core.products p ON p.product_id = t.product_id
                  JOIN billing.prices pr ON pr.product_id = t.product_id
                  WHERE t.rank > 0 AND p.published AND pr.active AND pr.sync_state = 'synced'
                    AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false) x), '[]') END
    )::text;
END
$$;

-- The home (0015) also lists each organization's displaced subscriptions, for Resume plan on `/`
-- and `/billing` (which reads the home's document).
CREATE OR REPLACE FUNCTION core.member_home(p_account bigint) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
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
            -- Live subscriptions another plan displaced (Resume plan brings them back), with what
            -- displaced them: one probe of the organization's subscriptions, empty for most.
            'displaced', coalesce((
                SELECT json_agg(json_build_object(
                    'subscription_id', s.subscription_id, 'product', ip.name, 'by', bp.name,
                    'granted', by_c.grant_id IS NOT NULL, 'until', coalesce(g.ends_at, by_c.ends_at)) ORDER BY s.subscription_id, i.subscription_item_id)
                FROM core.subscriptions s
                JOIN core.subscription_items i ON i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                JOIN core.subscription_displacements sd
                  ON sd.subscription_item_id = i.subscription_item_id AND sd.delivered_at IS NULL
                JOIN core.conferrals by_c ON by_c.conferral_id = sd.displaced_by AND by_c.state = 'holding'
                JOIN core.products ip ON ip.product_id = i.product_id
                JOIN core.products bp ON bp.product_id = by_c.product_id
                LEFT JOIN core.grants g ON g.grant_id = by_c.grant_id
                WHERE s.organization_id = o.organization_id AND s.status IN ('active', 'trialing')), '[]')
          ) ORDER BY o.name, o.organization_id), '[]')::text
        FROM core.organization_members m
        JOIN core.organizations o ON o.organization_id = m.organization_id
        LEFT JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        WHERE m.account_id = p_account);
END
$$;

-- ResumeSubscription's writes under the pool row the caller holds: each item of the subscription
-- that another plan displaced (and still holds) is delivered back, conferred over that plan (which
-- is displaced in turn: a grant becomes replaced and resumes when the subscription ends). The
-- caller refuses a subscription that is not active. How many items came back.
CREATE FUNCTION core.resume_subscription(p_pool bigint, p_subscription bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    d record;
    n integer := 0;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
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
        PERFORM core.confer(p_pool, d.product_id, NULL, d.subscription_item_id, d.quantity);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION core.resume_subscription(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.resume_subscription(bigint, bigint) TO console_runtime;

RESET ROLE;
