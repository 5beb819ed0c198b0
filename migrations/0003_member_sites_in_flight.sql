-- `/sites` marks a site whose request is in flight (no buttons) and polls while any is: its
-- requests are the latest `p_requests` (the recent history) and, apart from that limit, every one
-- still accepted, however old (a create still retrying behind twenty newer requests). The index
-- finds a workspace's accepted requests without reading its history.
SET LOCAL ROLE core_owner;

CREATE INDEX lifecycle_requests_workspace_open ON fedwiki.lifecycle_requests (workspace_id) WHERE state = 'accepted';

CREATE OR REPLACE FUNCTION fedwiki.member_sites(p_account bigint, p_requests integer) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN array_to_json(ARRAY(
        SELECT json_build_object(
            'organization_id', o.organization_id,
            'name', o.name,
            'sites', array_to_json(ARRAY(
                SELECT json_build_object(
                    'site_id', s.site_id, 'workspace_id', s.workspace_id, 'domain', s.domain, 'status', s.status,
                    'keep_active', s.keep_active, 'storage_bytes', s.storage_bytes, 'modified_at', s.modified_at,
                    'created_at', s.created_at, 'parked_by_sweep', s.parked_by_sweep,
                    'status_changed_at', s.status_changed_at)
                FROM fedwiki.sites s WHERE s.workspace_id = 'org-' || o.organization_id
                ORDER BY s.domain)),
            'requests', array_to_json(ARRAY(
                SELECT json_build_object(
                    'request_id', r.request_id, 'instance_id', r.instance_id, 'generation', r.generation,
                    'workspace_id', r.workspace_id, 'domain', r.domain, 'kind', r.kind, 'swap_of', r.swap_of,
                    'state', r.state, 'outcome', r.outcome, 'starts_as', r.starts_as, 'created_at', r.created_at,
                    'updated_at', r.updated_at)
                FROM ((SELECT * FROM fedwiki.lifecycle_requests
                        WHERE workspace_id = 'org-' || o.organization_id
                        ORDER BY request_id DESC LIMIT p_requests)
                      UNION
                      (SELECT * FROM fedwiki.lifecycle_requests
                        WHERE workspace_id = 'org-' || o.organization_id AND state = 'accepted')) r
                ORDER BY r.request_id DESC)),
            'used', coalesce(u.used, 0),
            'limit', coalesce(e.numeric_value, 0),
            'custom_domain', coalesce(d.flag_value, false),
            'domains', array_to_json(ARRAY(
                SELECT c.name FROM domains.claims c
                 WHERE c.owner = 'workspace:org-' || o.organization_id ORDER BY c.name)),
            'placements', array_to_json(ARRAY(
                SELECT json_build_array(pl.hostname, pl.object_id) FROM domains.placements pl
                 WHERE pl.owner = 'workspace:org-' || o.organization_id ORDER BY pl.hostname)),
            'last_swap_at', (SELECT sp.last_swap_at FROM fedwiki.swap_policies sp
                              WHERE sp.workspace_id = 'org-' || o.organization_id))
        FROM core.organization_members m
        JOIN core.organizations o USING (organization_id)
        LEFT JOIN core.resource_pools p ON p.organization_id = o.organization_id AND p.is_default
        LEFT JOIN core.numeric_entitlement_usage u ON u.pool_id = p.pool_id AND u.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
        LEFT JOIN core.pool_entitlements d ON d.pool_id = p.pool_id AND d.resource_key = 'fedwiki.custom_domain'
        WHERE m.account_id = p_account
        ORDER BY o.name, o.organization_id))::text;
END
$$;

RESET ROLE;
