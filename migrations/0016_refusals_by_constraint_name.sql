-- The two triggers that keep a tier's product on an entitlement set raise under a constraint name
-- (their trigger's), so the console tells the operator which field is wrong by the name
-- PostgreSQL reports, as it does for a unique or foreign key, and never by SQLSTATE. The
-- SQLSTATE (MC003), the message and the locks are unchanged.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION core.refuse_tier_product_without_set() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE s bigint;
BEGIN
    SELECT entitlement_set_id INTO s FROM core.products WHERE product_id = NEW.product_id FOR SHARE;
    IF s IS NULL THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
            CONSTRAINT = 'plan_ladder_tiers_product_has_set',
            DETAIL = format('product %s has no entitlement set', NEW.product_id);
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION core.refuse_clearing_tier_product_set() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.entitlement_set_id IS NULL AND OLD.entitlement_set_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM core.plan_ladder_tiers WHERE product_id = NEW.product_id) THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
            CONSTRAINT = 'products_keep_set_while_tier',
            DETAIL = format('product %s is a tier and must keep an entitlement set', NEW.product_id);
    END IF;
    RETURN NEW;
END
$$;

RESET ROLE;
