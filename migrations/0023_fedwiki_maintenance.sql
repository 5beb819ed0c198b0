-- FedWiki maintenance (issue 15): one schedule runs the farm sync, the retention purge and the
-- quota reconciliation, never two at once (the job queue's uniqueness); each run is recorded for
-- the operators. A member's page also reads which sites the quota parked and when an archived
-- site was archived (it is deleted after the retention period).
SET LOCAL ROLE core_owner;

CREATE TABLE fedwiki.maintenance_runs (
    run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    -- ok, or failed with the reason (the farm down: nothing half-written, the next run repairs).
    outcome text CHECK (outcome IN ('ok', 'failed')),
    error text,
    farm_sites integer,
    adopted integer NOT NULL DEFAULT 0,
    observed integer NOT NULL DEFAULT 0,
    statuses_written integer NOT NULL DEFAULT 0,
    statuses_left integer NOT NULL DEFAULT 0,
    removed integer NOT NULL DEFAULT 0,
    missing_on_farm integer NOT NULL DEFAULT 0,
    purged integer NOT NULL DEFAULT 0,
    parked integer NOT NULL DEFAULT 0,
    reactivated integer NOT NULL DEFAULT 0
);
CREATE INDEX maintenance_runs_recent ON fedwiki.maintenance_runs (run_id DESC);
GRANT SELECT, INSERT, DELETE ON fedwiki.maintenance_runs TO console_runtime;
GRANT UPDATE (finished_at, outcome, error, farm_sites, adopted, observed, statuses_written, statuses_left, removed,
              missing_on_farm, purged, parked, reactivated) ON fedwiki.maintenance_runs TO console_runtime;

CREATE OR REPLACE FUNCTION fedwiki.member_sites(p_account bigint, p_requests integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((
        SELECT json_agg(json_build_object(
            'organization_id', o.organization_id,
            'name', o.name,
            'sites', coalesce((
                SELECT json_agg(json_build_object(
                    'site_id', s.site_id, 'workspace_id', s.workspace_id, 'domain', s.domain, 'status', s.status,
                    'keep_active', s.keep_active, 'storage_bytes', s.storage_bytes, 'modified_at', s.modified_at,
                    'created_at', s.created_at, 'parked_by_sweep', s.parked_by_sweep,
                    'status_changed_at', s.status_changed_at) ORDER BY s.domain)
                FROM fedwiki.sites s WHERE s.workspace_id = 'org-' || o.organization_id), '[]'),
            'requests', coalesce((
                SELECT json_agg(json_build_object(
                    'request_id', r.request_id, 'instance_id', r.instance_id, 'generation', r.generation,
                    'workspace_id', r.workspace_id, 'domain', r.domain, 'kind', r.kind, 'swap_of', r.swap_of,
                    'state', r.state, 'outcome', r.outcome, 'starts_as', r.starts_as, 'created_at', r.created_at,
                    'updated_at', r.updated_at) ORDER BY r.request_id DESC)
                FROM (SELECT * FROM fedwiki.lifecycle_requests
                       WHERE workspace_id = 'org-' || o.organization_id
                       ORDER BY request_id DESC LIMIT p_requests) r), '[]'),
            'used', coalesce(u.used, 0),
            'limit', coalesce(e.numeric_value, 0),
            'custom_domain', coalesce(d.flag_value, false),
            'domains', coalesce((
                SELECT json_agg(c.name ORDER BY c.name) FROM domains.claims c
                 WHERE c.owner = 'workspace:org-' || o.organization_id), '[]'),
            'placements', coalesce((
                SELECT json_agg(json_build_array(pl.hostname, pl.object_id) ORDER BY pl.hostname) FROM domains.placements pl
                 WHERE pl.owner = 'workspace:org-' || o.organization_id), '[]'),
            'last_swap_at', (SELECT sp.last_swap_at FROM fedwiki.swap_policies sp
                              WHERE sp.workspace_id = 'org-' || o.organization_id))
            ORDER BY o.name, o.organization_id)
        FROM core.organization_members m
        JOIN core.organizations o USING (organization_id)
        LEFT JOIN core.resource_pools p ON p.organization_id = o.organization_id AND p.is_default
        LEFT JOIN core.numeric_entitlement_usage u ON u.pool_id = p.pool_id AND u.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements d ON d.pool_id = p.pool_id AND d.resource_key = 'fedwiki.custom_domain'
        WHERE m.account_id = p_account), '[]')::text;
END
$$;

RESET ROLE;
