-- The member's billing page in one statement, as the home is (0015): the home's document and each
-- organization's subscriptions, newest invoices and the tiers on sale, as one JSON document. A
-- plpgsql function keeps its statements' plans for the connection; called as a prepared
-- statement, a page view is one round trip after its session's.
SET LOCAL ROLE core_owner;

CREATE FUNCTION core.member_billing(p_account bigint, p_invoices integer) RETURNS text
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
                                WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL) AS ladders
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
REVOKE EXECUTE ON FUNCTION core.member_billing(bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_billing(bigint, integer) TO console_runtime;

RESET ROLE;
