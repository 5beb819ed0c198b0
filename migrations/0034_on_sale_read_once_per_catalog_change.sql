-- What is on sale is read once per change of the catalog, not on every view of /billing.
-- The list is the same for every member and changes only when an operator or the price sync
-- writes the catalog, yet it was read on every view: a four-table join that cost a seventh of
-- the page in PostgreSQL, more with a real catalog. Now:
-- - core.catalog_changes holds the id of every transaction that wrote one of the tables the list
--   reads (tiers, ladders, products, prices), written by statement triggers inside that
--   transaction. The insert conflicts with nothing another transaction writes (the id is the
--   writer's own), so it takes no lock beyond the insert's and changes no lock order.
-- - core.member_billing(account, invoices, snapshot) is given the snapshot the console read its
--   list in, and reads the list again only when a catalog writer is visible now that was not
--   visible then; it returns the snapshot it read the list in. Exact under MVCC: a writer that
--   had not committed when the list was read is not visible in that snapshot, so its commit
--   is seen by the next view.
-- - core.member_billing(account, invoices) stays for consoles of the earlier build while
--   replicas are upgraded: the same document, the list always read.
SET LOCAL ROLE core_owner;

-- Rows are never deleted: a deleted row could be a change a cached list has not yet seen. One
-- row per transaction that wrote the catalog, which operators and the price sync do rarely.
CREATE TABLE core.catalog_changes (
    xid xid8 PRIMARY KEY
);
GRANT SELECT ON core.catalog_changes TO console_runtime;

CREATE FUNCTION core.note_catalog_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    INSERT INTO core.catalog_changes (xid) VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION core.note_catalog_change() FROM PUBLIC;

CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON core.plan_ladder_tiers
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();
CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON core.plan_ladders
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();
CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON core.products
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();
CREATE TRIGGER catalog_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON billing.prices
    FOR EACH STATEMENT EXECUTE FUNCTION core.note_catalog_change();

CREATE FUNCTION core.member_billing(p_account bigint, p_invoices integer, p_on_sale_as_of pg_snapshot)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    orgs bigint[];
    v_subscriptions json := '[]';
    v_invoices json := '[]';
    v_on_sale json := '[]';
    v_on_sale_as_of pg_snapshot;
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
    -- What is on sale is the same for every member: read it only when the catalog changed since
    -- the snapshot the caller read it in, that is when a transaction that wrote the catalog is
    -- visible now and was not then (core.catalog_changes; one whose id is below that snapshot's
    -- xmin had ended by then). Unchanged, 'on_sale' is null and the caller keeps its list.
    IF cardinality(orgs) = 0 THEN
        NULL;
    ELSIF p_on_sale_as_of IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM core.catalog_changes c
                          WHERE c.xid >= pg_snapshot_xmin(p_on_sale_as_of)
                            AND NOT pg_visible_in_snapshot(c.xid, p_on_sale_as_of)) THEN
        v_on_sale := NULL;
    ELSE
        v_on_sale_as_of := pg_current_snapshot();
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
                             'invoices', v_invoices, 'on_sale', v_on_sale,
                             'on_sale_as_of', v_on_sale_as_of::text)::text;
END
$$;

REVOKE EXECUTE ON FUNCTION core.member_billing(bigint, integer, pg_snapshot) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.member_billing(bigint, integer, pg_snapshot) TO console_runtime;

-- The earlier build's call: the list always read.
CREATE OR REPLACE FUNCTION core.member_billing(p_account bigint, p_invoices integer) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT core.member_billing(p_account, p_invoices, NULL)
$$;

RESET ROLE;
