-- FedWiki sites (issue 13): workspaces, sites, lifecycle requests and their slot holds, the swap
-- policy, the farm's callbacks, and the domains registry (claims and placements) with the site
-- trigger that keeps a placement's servable flag. The locks and their order are the spec's
-- ("FedWiki at the handler", "At the slot gate", "When recording an outcome", "Registry").

SET LOCAL ROLE core_owner;

-- The domains registry ---------------------------------------------------------------------------

-- A name a workspace (owner `workspace:<id>`) or the farm's own zone (owner `farm`) holds. No
-- claim equals or lies under another owner's claim: the rule spans rows, so every mutation runs
-- under the registry's advisory lock (the Registry transaction kind), which is the check's guard.
CREATE TABLE domains.claims (
    name text PRIMARY KEY CONSTRAINT claims_name_is_hostname CHECK (
        name ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' AND length(name) <= 253),
    owner text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);

-- A hostname served by a provider's object (a FedWiki site). It lies under a claim of its own
-- owner or the farm's zone; one placement per hostname. `servable` is the site trigger's: true
-- while the site is active.
CREATE TABLE domains.placements (
    hostname text PRIMARY KEY CONSTRAINT placements_hostname_is_hostname CHECK (
        hostname ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'
        AND length(hostname) <= 253),
    owner text NOT NULL,
    provider text NOT NULL CONSTRAINT placements_provider_known CHECK (provider IN ('fedwiki')),
    object_id text NOT NULL,
    servable boolean NOT NULL DEFAULT false,
    placed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX placements_object ON domains.placements (provider, object_id);

-- Workspaces, sites, requests --------------------------------------------------------------------

-- One per organization (made on its first site), plus the System workspace: farm sites no
-- organization owns, adopted at sync.
CREATE TABLE fedwiki.workspaces (
    workspace_id text PRIMARY KEY,
    organization_id bigint UNIQUE REFERENCES core.organizations ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workspaces_system_or_organization CHECK ((organization_id IS NULL) = (workspace_id = 'system'))
);
INSERT INTO fedwiki.workspaces (workspace_id) VALUES ('system');

-- A site: its id is its lifecycle instance's id. `modified_at` and `storage_bytes` are what the
-- farm last reported; `parked_by_sweep` marks a site the quota reconciliation parked.
CREATE TABLE fedwiki.sites (
    site_id text PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES fedwiki.workspaces ON DELETE CASCADE,
    domain text NOT NULL CONSTRAINT sites_domain_unique UNIQUE,
    status text NOT NULL CONSTRAINT sites_status_known CHECK (status IN ('active', 'parked', 'archived')),
    keep_active boolean NOT NULL DEFAULT false,
    parked_by_sweep boolean NOT NULL DEFAULT false,
    storage_bytes bigint,
    modified_at timestamptz,
    observed_at timestamptz,
    status_changed_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sites_workspace ON fedwiki.sites (workspace_id, status);

-- A member's act on one instance (a site, or a site still to be created), recorded under the
-- instance's advisory lock; carried to its outcome by a durable job. Both requests of a swap
-- carry the activation's id in swap_of (the activation's own row too).
CREATE TABLE fedwiki.lifecycle_requests (
    request_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id text NOT NULL,
    generation integer NOT NULL CHECK (generation >= 1),
    workspace_id text NOT NULL REFERENCES fedwiki.workspaces ON DELETE CASCADE,
    domain text NOT NULL,
    kind text NOT NULL CONSTRAINT lifecycle_requests_kind_known
        CHECK (kind IN ('create', 'activate', 'park', 'archive', 'delete')),
    swap_of bigint REFERENCES fedwiki.lifecycle_requests,
    state text NOT NULL DEFAULT 'accepted'
        CONSTRAINT lifecycle_requests_state_known CHECK (state IN ('accepted', 'done', 'declined', 'failed')),
    outcome text,
    -- The status a create starts in, decided at the slot gate.
    starts_as text CHECK (starts_as IN ('active', 'parked')),
    requested_by bigint REFERENCES core.accounts ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT lifecycle_requests_generation_unique UNIQUE (instance_id, generation)
);
CREATE INDEX lifecycle_requests_open ON fedwiki.lifecycle_requests (instance_id) WHERE state = 'accepted';
CREATE INDEX lifecycle_requests_workspace ON fedwiki.lifecycle_requests (workspace_id, request_id DESC);

-- A slot an accepted create or activation holds in its pool between the gate and the record
-- step; written and deleted only under its request's instance lock.
CREATE TABLE fedwiki.slot_holds (
    request_id bigint PRIMARY KEY REFERENCES fedwiki.lifecycle_requests ON DELETE CASCADE,
    pool_id bigint NOT NULL REFERENCES core.resource_pools ON DELETE CASCADE,
    held_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX slot_holds_pool ON fedwiki.slot_holds (pool_id);

-- A workspace's last swap (and last activation, when activations have a cooldown), upserted
-- last under the workspace's advisory lock.
CREATE TABLE fedwiki.swap_policies (
    workspace_id text PRIMARY KEY REFERENCES fedwiki.workspaces ON DELETE CASCADE,
    last_swap_at timestamptz,
    last_activation_at timestamptz
);

-- The farm's callbacks received, by their id: a duplicate does nothing.
CREATE TABLE fedwiki.farm_callbacks (
    event_id text PRIMARY KEY,
    kind text NOT NULL,
    domain text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- Counting a pool's slots -------------------------------------------------------------------------

-- Active sites of the pool's organization's workspace plus the pool's open holds: the usage of
-- fedwiki.active_sites. Run as a statement of its own after the usage row's lock (rule 5).
CREATE FUNCTION fedwiki.count_slots(p_pool bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*) FROM fedwiki.sites s
              JOIN fedwiki.workspaces w USING (workspace_id)
              JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
             WHERE p.pool_id = p_pool AND s.status = 'active')
         + (SELECT count(*) FROM fedwiki.slot_holds h WHERE h.pool_id = p_pool)
$$;

-- HoldSiteSlotActivity in one call (one round trip with its implicit transaction), in the spec's
-- order: the request's instance lock, for an activation the site row, the pool's limit read
-- without a lock, the usage row, the count (a statement of its own: in a volatile function at
-- READ COMMITTED each statement takes a new snapshot, so it reads every commit before the lock's
-- grant), the hold, the recount. `p_instance` is the request's instance (the caller read it with
-- the request; it never changes). Answers '<outcome> <used> <limit>', the outcome one of held,
-- full, already_active, gone.
CREATE FUNCTION fedwiki.hold_site_slot(p_request bigint, p_instance text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r fedwiki.lifecycle_requests%ROWTYPE;
    v_status text;
    v_pool bigint;
    v_limit bigint := 0;
    v_used bigint := 0;
    v_outcome text;
BEGIN
    PERFORM pg_advisory_xact_lock(core.lifecycle_instance_key(p_instance));
    -- Under the lock: an outcome recorded before it was granted is seen.
    SELECT * INTO r FROM fedwiki.lifecycle_requests WHERE request_id = p_request AND instance_id = p_instance;
    IF NOT FOUND OR r.state <> 'accepted' THEN
        RETURN 'gone 0 0';
    END IF;
    IF EXISTS (SELECT 1 FROM fedwiki.slot_holds h WHERE h.request_id = p_request) THEN
        RETURN 'held 0 0';
    END IF;
    IF r.kind = 'activate' THEN
        SELECT s.status INTO v_status FROM fedwiki.sites s WHERE s.site_id = r.instance_id FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 'gone 0 0';
        ELSIF v_status = 'active' THEN
            RETURN 'already_active 0 0';
        END IF;
    END IF;
    SELECT p.pool_id, coalesce(e.numeric_value, 0) INTO v_pool, v_limit
      FROM fedwiki.workspaces w
      JOIN core.resource_pools p ON p.organization_id = w.organization_id AND p.is_default
      LEFT JOIN core.pool_entitlements e ON e.pool_id = p.pool_id AND e.resource_key = 'fedwiki.active_sites'
     WHERE w.workspace_id = r.workspace_id;
    v_outcome := 'full';
    IF v_pool IS NOT NULL THEN
        PERFORM 1 FROM core.numeric_entitlement_usage u
         WHERE u.pool_id = v_pool AND u.resource_key = 'fedwiki.active_sites' FOR UPDATE;
        IF FOUND THEN
            v_used := fedwiki.count_slots(v_pool);
            IF v_used < v_limit THEN
                INSERT INTO fedwiki.slot_holds (request_id, pool_id) VALUES (p_request, v_pool);
                UPDATE core.numeric_entitlement_usage SET used = fedwiki.count_slots(v_pool), counted_at = now()
                 WHERE pool_id = v_pool AND resource_key = 'fedwiki.active_sites';
                v_outcome := 'held';
            END IF;
        ELSE
            v_limit := 0;
        END IF;
    ELSE
        v_limit := 0;
    END IF;
    IF r.kind = 'create' THEN
        UPDATE fedwiki.lifecycle_requests
           SET starts_as = CASE v_outcome WHEN 'held' THEN 'active' ELSE 'parked' END, updated_at = clock_timestamp()
         WHERE request_id = p_request;
    END IF;
    RETURN format('%s %s %s', v_outcome, v_used, v_limit);
END
$$;

-- The member's /sites in one statement, as the home and billing pages are (0015, 0020): for each
-- organization of the account, its sites, its latest requests, its usage and limit of active
-- sites, whether it may use domains of its own, its domains and placements, and its last swap.
CREATE FUNCTION fedwiki.member_sites(p_account bigint, p_requests integer) RETURNS text
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
                    'created_at', s.created_at) ORDER BY s.domain)
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

-- The site trigger ---------------------------------------------------------------------------------

-- After a site row's write: its placements' servable flag follows its status, locking only the
-- placement rows whose flag changes (after the site row, before usage: rule 5). Flag-only, so it
-- runs outside the registry lock. Snapshot isolation would let it miss a placement a creator
-- committed after the snapshot, so it refuses it.
CREATE FUNCTION fedwiki.set_site_placement_servability() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_site text;
    v_servable boolean;
BEGIN
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'a FedWiki site is written at READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'P0001', CONSTRAINT = 'site_write_isolation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        v_site := OLD.site_id;
        v_servable := false;
    ELSE
        v_site := NEW.site_id;
        v_servable := NEW.status = 'active';
    END IF;
    UPDATE domains.placements SET servable = v_servable
     WHERE provider = 'fedwiki' AND object_id = v_site AND servable IS DISTINCT FROM v_servable;
    RETURN NULL;
END
$$;
CREATE TRIGGER sites_set_placement_servability
    AFTER INSERT OR DELETE OR UPDATE OF status ON fedwiki.sites
    FOR EACH ROW EXECUTE FUNCTION fedwiki.set_site_placement_servability();

-- The farm's zone is the farm's claim; a member's site is a placement under it.
INSERT INTO domains.claims (name, owner) VALUES ('wiki.localhost', 'farm');

GRANT SELECT, INSERT, DELETE ON domains.claims, domains.placements TO console_runtime;
GRANT SELECT, INSERT ON fedwiki.workspaces TO console_runtime;
GRANT SELECT, INSERT, DELETE ON fedwiki.sites, fedwiki.slot_holds TO console_runtime;
GRANT UPDATE (status, keep_active, parked_by_sweep, storage_bytes, modified_at, observed_at, status_changed_at)
    ON fedwiki.sites TO console_runtime;
GRANT SELECT, INSERT, DELETE ON fedwiki.lifecycle_requests TO console_runtime;
GRANT UPDATE (state, outcome, starts_as, updated_at) ON fedwiki.lifecycle_requests TO console_runtime;
GRANT SELECT, INSERT, UPDATE ON fedwiki.swap_policies TO console_runtime;
GRANT SELECT, INSERT ON fedwiki.farm_callbacks TO console_runtime;
REVOKE EXECUTE ON FUNCTION fedwiki.count_slots(bigint), fedwiki.hold_site_slot(bigint, text),
    fedwiki.member_sites(bigint, integer), fedwiki.set_site_placement_servability() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fedwiki.count_slots(bigint), fedwiki.hold_site_slot(bigint, text),
    fedwiki.member_sites(bigint, integer) TO console_runtime;

RESET ROLE;
