-- Three more SQL-language functions that plpgsql callers evaluate once per transaction, and that
-- PostgreSQL therefore plans again in every transaction (a SQL function whose body holds a
-- sub-select is never inlined, and a plpgsql expression's cache of it lasts one transaction):
-- the active-site count every usage recount and slot gate runs (`fedwiki.count_slots`: 150 µs
-- of planning around a 5 µs count, once per farm-sync status write, recount and gate), the
-- rendezvous check every materializing or settling transaction makes once
-- (`core.holds_rendezvous`: 85 µs of planning), and the free-ladders check that resuming a
-- replaced grant or delivering a displaced subscription makes per candidate
-- (`core.ladders_free_for`). As plpgsql their plans are kept for the session. Same bodies,
-- volatility, owners and grants; no lock changes.
SET LOCAL ROLE core_owner;

CREATE OR REPLACE FUNCTION fedwiki.count_slots(p_pool bigint) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM fedwiki.sites s
              JOIN fedwiki.workspaces w USING (workspace_id)
              JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
             WHERE p.pool_id = p_pool AND s.status = 'active')
         + (SELECT count(*) FROM fedwiki.slot_holds h WHERE h.pool_id = p_pool);
END
$$;

CREATE OR REPLACE FUNCTION core.holds_rendezvous() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_locks
                    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1
                      AND classid = ((core.rendezvous_key() >> 32) & 4294967295)::oid
                      AND objid = (core.rendezvous_key() & 4294967295)::oid);
END
$$;

CREATE OR REPLACE FUNCTION core.ladders_free_for(p_pool bigint, p_product bigint) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    RETURN NOT EXISTS (
        SELECT 1
        FROM core.plan_ladder_tiers t
        JOIN core.positions p ON p.pool_id = p_pool AND p.plan_ladder_id = t.plan_ladder_id
        JOIN core.conferrals c ON c.conferral_id = p.conferral_id
        LEFT JOIN core.grants g ON g.grant_id = c.grant_id
        WHERE t.product_id = p_product AND g.kind IS DISTINCT FROM 'floor'
    );
END
$$;

RESET ROLE;
