-- Issue 40: a member's domain holds only once DNS proves the organization controls it
-- (docs/fedwiki.md, "Custom domains"). A claim starts pending, with a token the member publishes
-- as `_member-console-challenge.<domain> TXT "<token>"`; a pending claim holds nothing, and several
-- organizations may wait on one name. The first to verify gets a row in `domains.claims`; the
-- others are let go with a notice. A verified claim is checked again daily: a record missing for
-- 72 hours makes it lapse (its placements leave the servable set), and 7 days later it is released.
SET LOCAL ROLE core_owner;

-- A domain a workspace asked for and has not proven. No rule spans these rows (they hold nothing),
-- but every write to them runs in a Registry transaction all the same, so a verification that
-- lets the other owners' claims go sees every one of them.
CREATE TABLE domains.pending_claims (
    name text NOT NULL CONSTRAINT pending_claims_name_is_hostname CHECK (
        name ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' AND length(name) <= 253),
    owner text NOT NULL,
    token text NOT NULL CONSTRAINT pending_claims_token_shape CHECK (token ~ '^[a-z0-9-]{16,80}$'),
    created_at timestamptz NOT NULL,
    -- Seven days after the claim: unverified by then, it is let go.
    expires_at timestamptz NOT NULL,
    -- The last check, its outcome (`found` never stays: a found record verifies the claim).
    checked_at timestamptz,
    check_outcome text CONSTRAINT pending_claims_outcome_known
        CHECK (check_outcome IN ('missing', 'other_value', 'could_not_check')),
    check_detail text,
    next_check_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
CREATE INDEX pending_claims_due ON domains.pending_claims (next_check_at);
CREATE INDEX pending_claims_owner ON domains.pending_claims (owner);

-- A verified claim keeps the token that proved it (the record must stay) and its checks. The
-- farm's zone has none: it is the farm's by configuration and never checked.
ALTER TABLE domains.claims
    ADD COLUMN token text CONSTRAINT claims_token_shape CHECK (token ~ '^[a-z0-9-]{16,80}$'),
    ADD COLUMN verified_at timestamptz,
    ADD COLUMN checked_at timestamptz,
    ADD COLUMN check_outcome text CONSTRAINT claims_outcome_known
        CHECK (check_outcome IN ('found', 'missing', 'other_value', 'could_not_check')),
    ADD COLUMN check_detail text,
    -- The first check that found the record gone, since the last that found it.
    ADD COLUMN missing_since timestamptz,
    -- Missing for 72 hours: its placements are no longer servable, and it is released 7 days on.
    ADD COLUMN lapsed_at timestamptz,
    ADD COLUMN next_check_at timestamptz,
    ADD CONSTRAINT claims_checked_with_a_token CHECK (token IS NOT NULL OR next_check_at IS NULL),
    ADD CONSTRAINT claims_lapse_after_missing CHECK (lapsed_at IS NULL OR missing_since IS NOT NULL);
CREATE INDEX claims_due ON domains.claims (next_check_at) WHERE next_check_at IS NOT NULL;

-- Claims made before verification existed were never proven: they get a token, and their first
-- check (due now) starts the 72 hours in which the member adds the record, as the page says.
UPDATE domains.claims
   SET token = 'mc-' || replace(gen_random_uuid()::text, '-', ''),
       verified_at = claimed_at,
       next_check_at = now()
 WHERE owner <> 'farm';

-- What a member is told about a domain that changed without their asking (a claim another
-- organization verified first, one that expired, lapsed, came back or was released). Shown on
-- /sites until dismissed; the console's log says the same.
CREATE TABLE domains.claim_notices (
    notice_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner text NOT NULL,
    name text NOT NULL,
    sentence text NOT NULL CONSTRAINT claim_notices_sentence_check CHECK (length(sentence) BETWEEN 1 AND 500),
    created_at timestamptz NOT NULL
);
CREATE INDEX claim_notices_owner ON domains.claim_notices (owner, notice_id);

-- The registry's servable set, what a farm's proxy routes by: a placement whose site is active
-- (its `servable` flag, kept by the site trigger) under no lapsed claim of its owner. A view, so
-- a lapse changes no placement row and takes no site's lock: the site trigger keeps its flag alone.
CREATE VIEW domains.servable_placements AS
SELECT p.hostname, p.owner, p.provider, p.object_id, p.placed_at
  FROM domains.placements p
 WHERE p.servable
   AND NOT EXISTS (SELECT 1 FROM domains.claims c
                    WHERE c.owner = p.owner AND c.lapsed_at IS NOT NULL
                      AND (p.hostname = c.name OR right(p.hostname, length(c.name) + 1) = '.' || c.name));

-- /sites reads each domain's state and the notices with the rest of its document.
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
                SELECT json_build_object(
                    'name', x.name, 'token', x.token, 'pending', x.pending, 'since', x.since,
                    'expires_at', x.expires_at, 'checked_at', x.checked_at, 'check_outcome', x.check_outcome,
                    'check_detail', x.check_detail, 'missing_since', x.missing_since, 'lapsed_at', x.lapsed_at)
                  FROM ((SELECT c.name, c.token, false AS pending, coalesce(c.verified_at, c.claimed_at) AS since,
                                NULL::timestamptz AS expires_at, c.checked_at, c.check_outcome, c.check_detail,
                                c.missing_since, c.lapsed_at
                           FROM domains.claims c WHERE c.owner = 'workspace:org-' || o.organization_id)
                        UNION ALL
                        (SELECT pc.name, pc.token, true, pc.created_at, pc.expires_at, pc.checked_at,
                                pc.check_outcome, pc.check_detail, NULL, NULL
                           FROM domains.pending_claims pc WHERE pc.owner = 'workspace:org-' || o.organization_id)) x
                 ORDER BY x.name, x.pending)),
            'domain_notices', array_to_json(ARRAY(
                SELECT json_build_object('notice_id', n.notice_id, 'name', n.name, 'sentence', n.sentence,
                                         'created_at', n.created_at)
                  FROM domains.claim_notices n WHERE n.owner = 'workspace:org-' || o.organization_id
                 ORDER BY n.notice_id DESC LIMIT 20)),
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

-- A lapsed claim released (by its member, or seven days on): every placement of its owner at or
-- under it, FOR UPDATE in host name order (the order the site trigger and
-- domains.delete_site_placements take them in), then deleted; the host names, in that order.
-- SECURITY DEFINER: the run-time role holds no UPDATE on placements, which FOR UPDATE needs.
CREATE FUNCTION domains.delete_placements_under(p_name text, p_owner text) RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_host text;
    v_hosts text[] := '{}';
BEGIN
    -- One row at a time, so each lock is taken (and traced) before the next: the set is the
    -- registry lock's to keep (every placement's insert and delete runs under it).
    FOR v_host IN SELECT hostname FROM domains.placements
                   WHERE owner = p_owner
                     AND (hostname = p_name OR right(hostname, length(p_name) + 1) = '.' || p_name)
                   ORDER BY hostname LOOP
        PERFORM 1 FROM domains.placements WHERE hostname = v_host FOR UPDATE;
        IF FOUND THEN
            IF current_setting('member_console.lock_trace', true) = 'on' THEN
                PERFORM core.note_lock('PlacementRows', v_host, 'FOR UPDATE', NULL);
            END IF;
            v_hosts := v_hosts || v_host;
        END IF;
    END LOOP;
    DELETE FROM domains.placements WHERE owner = p_owner AND hostname = ANY (v_hosts);
    RETURN QUERY SELECT unnest(v_hosts);
END
$$;
REVOKE EXECUTE ON FUNCTION domains.delete_placements_under(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION domains.delete_placements_under(text, text) TO console_runtime;

GRANT SELECT, INSERT, DELETE ON domains.pending_claims, domains.claim_notices TO console_runtime;
GRANT UPDATE (checked_at, check_outcome, check_detail, next_check_at) ON domains.pending_claims TO console_runtime;
GRANT UPDATE (checked_at, check_outcome, check_detail, missing_since, lapsed_at, next_check_at)
    ON domains.claims TO console_runtime;
GRANT SELECT ON domains.servable_placements TO console_runtime;

RESET ROLE;
