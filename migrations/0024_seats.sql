-- Seats: a product may be sold in more than one unit ("seats"), up to the number an operator sets
-- on it; a member buys a number of them and changes it later. The member's billing page reads
-- each item's seats and price, and each tier's most seats (0022's function, again); a switch
-- quote keeps the seats it was quoted for.
SET LOCAL ROLE core_owner;

ALTER TABLE core.products ADD COLUMN max_quantity integer NOT NULL DEFAULT 1
    CONSTRAINT products_max_quantity_range CHECK (max_quantity BETWEEN 1 AND 1000);
GRANT UPDATE (max_quantity) ON core.products TO console_runtime;

ALTER TABLE billing.switch_quotes ADD COLUMN quantity integer NOT NULL DEFAULT 1 CHECK (quantity >= 1);

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
                         pr.amount_minor, pr.currency, l.sort_order, l.plan_ladder_id, p.max_quantity
                  FROM core.plan_ladder_tiers t
                  JOIN core.plan_ladders l USING (plan_ladder_id)
                  JOIN core.products p ON p.product_id = t.product_id
                  JOIN billing.prices pr ON pr.product_id = t.product_id
                  WHERE t.rank > 0 AND p.published AND pr.active AND pr.sync_state = 'synced'
                    AND pr.stripe_price_id IS NOT NULL AND pr.stripe_active IS NOT false) x), '[]') END
    )::text;
END
$$;

RESET ROLE;
