-- What the farm reported of a site (storage, modification time) is ordered by the farm's own clock:
-- `observed_as_of` is the moment the stored values describe, a callback's `occurred_at` or a sync
-- list's `listed_at` (docs/farm-api.md: every change a list does not show happened after it). An
-- observation older than it writes nothing, so a callback delivered late, or a list read before a
-- callback the console already recorded, never puts older values back. `observed_at` stays the
-- console's clock at the write. NULL until the first observation since this migration.
SET LOCAL ROLE core_owner;

ALTER TABLE fedwiki.sites ADD COLUMN observed_as_of timestamptz;
GRANT UPDATE (observed_as_of) ON fedwiki.sites TO console_runtime;

-- SyncSitesToDB's writeStatus: LockSiteStatusByDomain; then, in a statement of its own, whether a
-- request on the site is still accepted or changed at or after the listing (then nothing is
-- written: the request's record step writes the status); otherwise the farm's status and the pool's
-- recount, and what it measured unless the console already holds a later observation (a callback
-- that occurred after the list was taken): the status is the sync's to write, the measurements
-- the latest report's. The site trigger moves the placements. True when written.
CREATE OR REPLACE FUNCTION fedwiki.write_farm_status(p_domain text, p_status text, p_storage_bytes bigint,
                                                     p_modified_at timestamptz, p_listed_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    s record;
    v_pool bigint;
    v_newer boolean;
BEGIN
    SELECT site_id, workspace_id, status, observed_as_of INTO s FROM fedwiki.sites WHERE domain = p_domain FOR UPDATE;
    IF NOT FOUND OR s.status = p_status THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM fedwiki.lifecycle_requests
                WHERE instance_id = s.site_id AND (state = 'accepted' OR updated_at >= p_listed_at)) THEN
        RETURN false;
    END IF;
    v_newer := s.observed_as_of IS NULL OR s.observed_as_of <= p_listed_at;
    UPDATE fedwiki.sites
       SET status = p_status, status_changed_at = now(), parked_by_sweep = false,
           storage_bytes = CASE WHEN v_newer THEN p_storage_bytes ELSE storage_bytes END,
           modified_at = CASE WHEN v_newer THEN coalesce(p_modified_at, modified_at) ELSE modified_at END,
           observed_at = CASE WHEN v_newer THEN now() ELSE observed_at END,
           observed_as_of = CASE WHEN v_newer THEN p_listed_at ELSE observed_as_of END
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

RESET ROLE;
