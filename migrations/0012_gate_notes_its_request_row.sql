-- Issue 36, the slot gate's walk (path 35): for a create, the gate writes the request's
-- starts_as on its request row, after the usage row's lock and count. That write locks the row
-- (a plain UPDATE, no key) through commit, in rule 5's order (the request rows last), but it
-- noted no lock, so the trace and the row-level walk could not show it and its declaration
-- (HOLD_SITE_SLOT_LOCKS) did not name it. The function is the one migration 0006 wrote, the
-- request row's note added after its UPDATE.
CREATE OR REPLACE FUNCTION fedwiki.hold_site_slot(p_request bigint, p_instance text) RETURNS text
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
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('LifecycleInstance', core.lifecycle_instance_key(p_instance)::text, 'exclusive', p_request);
    END IF;
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
        IF FOUND AND current_setting('member_console.lock_trace', true) = 'on' THEN
            PERFORM core.note_lock('SiteRow', r.instance_id, 'FOR UPDATE', NULL);
        END IF;
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
            IF current_setting('member_console.lock_trace', true) = 'on' THEN
                PERFORM core.note_lock('UsageRow', v_pool::text || ',fedwiki.active_sites', 'FOR UPDATE', v_pool);
            END IF;
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
        IF current_setting('member_console.lock_trace', true) = 'on' THEN
            PERFORM core.note_lock('LifecycleRequestRows', p_request::text, 'UPDATE', p_request);
        END IF;
    END IF;
    RETURN format('%s %s %s', v_outcome, v_used, v_limit);
END
$$;
