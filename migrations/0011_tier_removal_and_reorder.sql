-- Tier removal and the tier reorder. A reorder that changes a ladder's rank 0 reaches the types
-- defaulting to the ladder without changing their default ladder: the floor that moves is the
-- old rank-0 product, so an act remembers it next to the ladder.
SET LOCAL ROLE core_owner;

-- A tier removal ends its incumbents' grants; a grandfathered incumbent's legacy grant says why.
ALTER TABLE core.grant_events DROP CONSTRAINT grant_events_act_check,
    ADD CONSTRAINT grant_events_act_check
    CHECK (act IN ('issued', 'started', 'revoked', 'expired', 'extended', 'rescheduled', 'provisioned', 'ended', 'grandfathered'));

ALTER TABLE core.plan_act_reached_types ADD COLUMN from_product_id bigint REFERENCES core.products;

-- core.outgoing_default_exists takes the floor's product too (a reorder's old floor is one product
-- of a ladder that stays the default); a null product is any product of the ladder, which is what
-- the two-argument form it replaces asked.
DROP FUNCTION core.outgoing_default_exists(bigint, bigint);
CREATE FUNCTION core.outgoing_default_exists(p_type bigint, p_ladder bigint, p_product bigint) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, core AS $$
    SELECT EXISTS (
        SELECT 1 FROM core.organizations o
        JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default
        JOIN core.positions ps ON ps.pool_id = rp.pool_id AND ps.plan_ladder_id = p_ladder
        JOIN core.conferrals c ON c.conferral_id = ps.conferral_id
        JOIN core.grants g ON g.grant_id = c.grant_id AND g.kind = 'floor'
        WHERE o.org_type_id = p_type AND (p_product IS NULL OR c.product_id = p_product))
$$;

-- RenumberTiers: a ladder's tiers take the given ranks (products in rank order, from 0), with the
-- rank key deferred to the commit. Only under the exclusive rendezvous.
CREATE FUNCTION core.renumber_tiers(p_ladder bigint, p_products bigint[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core AS $$
DECLARE
    n integer;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    SET CONSTRAINTS core.plan_ladder_tiers_pkey DEFERRED;
    UPDATE core.plan_ladder_tiers t SET rank = o.ord - 1
      FROM unnest(p_products) WITH ORDINALITY AS o(product_id, ord)
     WHERE t.plan_ladder_id = p_ladder AND t.product_id = o.product_id AND t.rank <> o.ord - 1;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE EXECUTE ON FUNCTION core.outgoing_default_exists(bigint, bigint, bigint), core.renumber_tiers(bigint, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.outgoing_default_exists(bigint, bigint, bigint), core.renumber_tiers(bigint, bigint[])
TO console_runtime;

RESET ROLE;
