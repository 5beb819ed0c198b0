-- The farm sync's writes in one round trip each (issue 15's benchmark): writeStatus and the
-- pass's closing recount were eight and four statements, each a round trip, per site and per
-- pool. The locks and their order are the same as before (docs/database-locks.md): the site row,
-- the placements through the site trigger, then the usage row; each later statement of these
-- VOLATILE functions takes a new snapshot, so it sees every commit that preceded the lock before
-- it.
SET LOCAL ROLE core_owner;

-- usage.Recount: the pool's usage row of active sites FOR UPDATE, the count in a statement of its
-- own, the write. Null, with no lock taken and nothing written, when the pool has no usage row.
CREATE FUNCTION fedwiki.recount_site_usage(p_pool bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_used bigint;
BEGIN
    PERFORM 1 FROM core.numeric_entitlement_usage
     WHERE pool_id = p_pool AND resource_key = 'fedwiki.active_sites' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_used := fedwiki.count_slots(p_pool);
    UPDATE core.numeric_entitlement_usage SET used = v_used, counted_at = now()
     WHERE pool_id = p_pool AND resource_key = 'fedwiki.active_sites';
    RETURN v_used;
END
$$;

-- SyncSitesToDB's writeStatus: LockSiteStatusByDomain; then, in a statement of its own, whether a
-- request on the site is still accepted or changed at or after the listing (then nothing is
-- written: the request's record step writes the status); otherwise the farm's status and what it
-- measured (the site trigger moves the placements), then the pool's recount. True when written.
CREATE FUNCTION fedwiki.write_farm_status(p_domain text, p_status text, p_storage_bytes bigint,
                                          p_modified_at timestamptz, p_listed_at timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_pool bigint;
BEGIN
    SELECT site_id, workspace_id, status INTO s FROM fedwiki.sites WHERE domain = p_domain FOR UPDATE;
    IF NOT FOUND OR s.status = p_status THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests
                WHERE instance_id = s.site_id AND (state = 'accepted' OR updated_at >= p_listed_at)) THEN
        RETURN false;
    END IF;
    UPDATE fedwiki.sites
       SET status = p_status, status_changed_at = now(), parked_by_sweep = false,
           storage_bytes = p_storage_bytes, modified_at = coalesce(p_modified_at, modified_at), observed_at = now()
     WHERE site_id = s.site_id;
    SELECT p.pool_id INTO v_pool FROM fedwiki.workspaces w
      JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
     WHERE w.workspace_id = s.workspace_id;
    IF v_pool IS NOT NULL THEN
        PERFORM fedwiki.recount_site_usage(v_pool);
    END IF;
    RETURN true;
END
$$;

REVOKE EXECUTE ON FUNCTION fedwiki.recount_site_usage(bigint),
    fedwiki.write_farm_status(text, text, bigint, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fedwiki.recount_site_usage(bigint),
    fedwiki.write_farm_status(text, text, bigint, timestamptz, timestamptz) TO console_runtime;

RESET ROLE;
