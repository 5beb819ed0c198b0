-- Issue 36: every lock at row level. A trace of each lock acquisition, written by the locking
-- functions when the setting member_console.lock_trace is 'on' (stress and the lock tests turn it
-- on for their connections; off, each site costs one setting read), a pause hook for the tests,
-- and two fixes: the pool row's "already locked" mark is gone (defect 3: the run-time role could
-- forge it), and the multi-row writes lock in key order first (defect 6). docs/database-locks.md,
-- "The lock trace", describes the mechanism.
SET LOCAL ROLE core_owner;

-- One row per lock acquisition of a traced transaction, in the order it happened. UNLOGGED: a
-- diagnostic, read back after a run and never needed after a crash. A rolled-back transaction's
-- rows go with it (the trace is transactional, as the locks are).
CREATE UNLOGGED TABLE core.lock_trace (
    xact xid8 NOT NULL,
    -- The row's place in its transaction (locks and markers together).
    seq integer NOT NULL,
    -- The lock's place among the transaction's locks (null for a marker): the pause hook's step.
    n integer,
    pid integer NOT NULL,
    -- The transaction's path (member_console.lock_path, the first one named in the transaction).
    path text,
    -- The lock's name (src/db/locks.rs, `Lock::trace_name`), or 'path' or 'step' for a marker.
    lock text NOT NULL,
    -- An advisory lock's key value; a row's primary key (columns joined by ','); a marker's name.
    key text,
    -- Where the spec orders keys (pool_id, act, request, record, ladder ...): the value ordered; a
    -- rule change's obligation row, ordered by (pool_id, act_id), as pool_id * 10^9 + act_id.
    ordinal bigint,
    mode text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (xact, seq)
);
REVOKE ALL ON core.lock_trace FROM PUBLIC;

-- Family 2 (hashtextextended of a prefixed string): the test-only key a paused path waits on
-- after its n-th lock (src/db/keys.rs, AdvisoryKey::TracePause).
CREATE FUNCTION core.trace_pause_key(tag text, n integer) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended('lock-trace-pause:' || tag || ':' || n::text, 0);
GRANT EXECUTE ON FUNCTION core.trace_pause_key(text, integer) TO console_runtime;

-- Note one acquisition, right after it. Nothing unless tracing is on. A lock the transaction
-- already noted (same name, same key) is not a new acquisition. With member_console.lock_pause
-- set to a tag (and member_console.lock_pause_path, if set, naming its path), the transaction then waits for the shared lock on trace_pause_key(tag, n), which
-- a test holds exclusively to keep it paused right after its n-th lock; lock_timeout is lifted
-- for that wait alone (a Materializing transaction's 5 s bound would end a test's pause).
CREATE FUNCTION core.note_lock(p_lock text, p_key text, p_mode text, p_ordinal bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_xact xid8;
    v_seq integer;
    v_n integer;
    v_tag text;
    v_bound text;
BEGIN
    IF current_setting('member_console.lock_trace', true) IS DISTINCT FROM 'on' THEN
        RETURN;
    END IF;
    v_xact := pg_current_xact_id();
    IF EXISTS (SELECT 1 FROM core.lock_trace t
                WHERE t.xact = v_xact AND t.lock = p_lock AND t.key IS NOT DISTINCT FROM p_key) THEN
        RETURN;
    END IF;
    v_seq := coalesce(nullif(current_setting('member_console.lock_seq', true), '')::integer, 0) + 1;
    v_n := coalesce(nullif(current_setting('member_console.lock_n', true), '')::integer, 0) + 1;
    PERFORM set_config('member_console.lock_seq', v_seq::text, true);
    PERFORM set_config('member_console.lock_n', v_n::text, true);
    INSERT INTO core.lock_trace (xact, seq, n, pid, path, lock, key, ordinal, mode)
    VALUES (v_xact, v_seq, v_n, pg_backend_pid(), nullif(current_setting('member_console.lock_path', true), ''),
            p_lock, p_key, p_ordinal, p_mode);
    v_tag := nullif(current_setting('member_console.lock_pause', true), '');
    -- member_console.lock_pause_path, when set, limits the pause to that path's transactions.
    IF v_tag IS NOT NULL
       AND coalesce(nullif(current_setting('member_console.lock_pause_path', true), ''),
                    current_setting('member_console.lock_path', true)) IS NOT DISTINCT FROM
           current_setting('member_console.lock_path', true) THEN
        v_bound := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', '0', true);
        PERFORM pg_advisory_xact_lock_shared(core.trace_pause_key(v_tag, v_n));
        PERFORM set_config('lock_timeout', v_bound, true);
    END IF;
END
$$;

-- A marker: 'path' names the transaction's path (the first one named wins, so a path called
-- inside another's transaction is counted as observed and its locks stay the caller's); 'step'
-- names a sub-step or branch that has no declaration of its own.
CREATE FUNCTION core.note_marker(p_kind text, p_name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_seq integer;
BEGIN
    IF current_setting('member_console.lock_trace', true) IS DISTINCT FROM 'on' OR p_kind NOT IN ('path', 'step') THEN
        RETURN;
    END IF;
    IF p_kind = 'path' AND coalesce(current_setting('member_console.lock_path', true), '') = '' THEN
        PERFORM set_config('member_console.lock_path', p_name, true);
    END IF;
    v_seq := coalesce(nullif(current_setting('member_console.lock_seq', true), '')::integer, 0) + 1;
    PERFORM set_config('member_console.lock_seq', v_seq::text, true);
    INSERT INTO core.lock_trace (xact, seq, n, pid, path, lock, key, ordinal, mode)
    VALUES (pg_current_xact_id(), v_seq, NULL, pg_backend_pid(),
            nullif(current_setting('member_console.lock_path', true), ''), p_kind, p_name, NULL, '');
END
$$;
REVOKE EXECUTE ON FUNCTION core.note_lock(text, text, text, bigint), core.note_marker(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION core.note_lock(text, text, text, bigint), core.note_marker(text, text) TO console_runtime;

-- The pool row, FOR UPDATE, every time (defect 3). The mark core.locked_pool that skipped a
-- second FOR UPDATE was a setting the run-time role can write: set_config('core.locked_pool',
-- '<id>', true) made every conferral function skip the lock (spec rule 2). Taking a row the
-- transaction already holds again is one index probe and no write (PostgreSQL sees its own lock
-- on the tuple): about 8 us more per call than the forgeable mark, and less than a sealed mark
-- costs to check (docs/database-locks.md, "Defects fixed with the trace"), so the shortcut goes.
CREATE OR REPLACE FUNCTION core.lock_pool(p_pool bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM 1 FROM core.resource_pools WHERE pool_id = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pool_not_found' USING ERRCODE = 'MC004', DETAIL = format('pool %s', p_pool);
    END IF;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('PoolRow', p_pool::text, 'FOR UPDATE', p_pool);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION core.lock_pools(p_pools bigint[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        FOR v IN SELECT pool_id FROM core.resource_pools WHERE pool_id = ANY (p_pools) ORDER BY pool_id FOR UPDATE LOOP
            PERFORM core.note_lock('PoolRow', v::text, 'FOR UPDATE', v);
        END LOOP;
    ELSE
        PERFORM 1 FROM core.resource_pools WHERE pool_id = ANY (p_pools) ORDER BY pool_id FOR UPDATE;
    END IF;
END
$$;

-- Releasing a site's names: its placement rows FOR UPDATE in hostname order, then the DELETE
-- (defect 6; the site trigger locks the rows it changes in the same order). SECURITY DEFINER:
-- the run-time role holds no UPDATE on placements, which FOR UPDATE needs (spec rule 9).
CREATE FUNCTION domains.delete_site_placements(p_site text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_host text;
    n bigint;
BEGIN
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        FOR v_host IN SELECT hostname FROM domains.placements WHERE provider = 'fedwiki' AND object_id = p_site
                       ORDER BY hostname FOR UPDATE LOOP
            PERFORM core.note_lock('PlacementRows', v_host, 'FOR UPDATE', NULL);
        END LOOP;
    ELSE
        PERFORM 1 FROM domains.placements WHERE provider = 'fedwiki' AND object_id = p_site
          ORDER BY hostname FOR UPDATE;
    END IF;
    DELETE FROM domains.placements WHERE provider = 'fedwiki' AND object_id = p_site;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION domains.delete_site_placements(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION domains.delete_site_placements(text) TO console_runtime;

-- The conferral, rule-change and plan-act functions, restated with their trace notes ------------

CREATE OR REPLACE FUNCTION core.take_rendezvous_shared() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(core.rendezvous_key());
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('RendezvousShared', core.rendezvous_key()::text, 'shared', NULL);
    END IF;
    PERFORM set_config('core.rendezvous_mark', core.rendezvous_seal(), true);
END
$$;

CREATE OR REPLACE FUNCTION core.take_rendezvous_exclusive() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(core.rendezvous_key());
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('RendezvousExclusive', core.rendezvous_key()::text, 'exclusive', NULL);
    END IF;
    PERFORM set_config('core.rendezvous_mark', core.rendezvous_seal(), true);
END
$$;

CREATE OR REPLACE FUNCTION core.commit_rule_change(
    p_change bigint, p_position integer, p_set bigint, p_key text, p_numeric bigint, p_flag boolean, p_list boolean
) RETURNS TABLE (act_id bigint, pools bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    old_n bigint;
    old_f boolean;
    a bigint;
    n bigint;
BEGIN
    PERFORM core.assert_exclusive_rendezvous();
    PERFORM 1 FROM core.entitlement_sets WHERE entitlement_set_id = p_set FOR UPDATE;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('EntitlementSetRow', p_set::text, 'FOR UPDATE', p_set);
    END IF;
    SELECT r.numeric_value, r.flag_value INTO old_n, old_f
      FROM core.entitlement_set_rules r
     WHERE r.entitlement_set_id = p_set AND r.resource_key = p_key
       FOR UPDATE;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('RuleRow', p_set::text || ',' || p_key, 'FOR UPDATE', NULL);
    END IF;
    INSERT INTO core.entitlement_set_change_acts (change_id, position, resource_key, old_numeric, old_flag, new_numeric, new_flag)
    VALUES (p_change, p_position, p_key, old_n, old_f, p_numeric, p_flag)
    RETURNING entitlement_set_change_acts.act_id INTO a;
    IF p_numeric IS NULL AND p_flag IS NULL THEN
        DELETE FROM core.entitlement_set_rules WHERE entitlement_set_id = p_set AND resource_key = p_key;
    ELSE
        INSERT INTO core.entitlement_set_rules (entitlement_set_id, resource_key, numeric_value, flag_value)
        VALUES (p_set, p_key, p_numeric, p_flag)
        ON CONFLICT (entitlement_set_id, resource_key)
        DO UPDATE SET numeric_value = EXCLUDED.numeric_value, flag_value = EXCLUDED.flag_value;
    END IF;
    n := 0;
    IF p_list THEN
        INSERT INTO core.entitlement_set_change_obligations (act_id, pool_id)
        SELECT DISTINCT a, c.pool_id
          FROM core.products p
          JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding'
         WHERE p.entitlement_set_id = p_set;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT a, n;
END
$$;

CREATE OR REPLACE FUNCTION core.settle_obligation(p_act bigint, p_pool bigint, p_error text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    st text;
    tries integer;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT o.state, o.attempts INTO st, tries
      FROM core.entitlement_set_change_obligations o
     WHERE o.act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE;
    IF st IS NOT NULL AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('ChangeObligationRow', p_act::text || ',' || p_pool::text, 'FOR UPDATE',
                                p_pool * 1000000000 + p_act);
    END IF;
    IF st IS NULL OR st = 'settled' THEN
        RETURN false;
    END IF;
    IF p_error IS NULL THEN
        UPDATE core.entitlement_set_change_obligations
           SET state = 'settled', settled_at = now(), attempts = tries + 1, next_attempt_at = NULL
         WHERE act_id = p_act AND pool_id = p_pool;
    ELSE
        -- 2 s, 4 s, 8 s ... capped at 10 minutes.
        UPDATE core.entitlement_set_change_obligations
           SET state = 'failed', attempts = tries + 1, last_error = left(p_error, 2000),
               next_attempt_at = now() + least(interval '10 minutes', interval '2 seconds' * power(2, least(tries, 12)))
         WHERE act_id = p_act AND pool_id = p_pool;
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION core.list_rule_change_obligations(p_change bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    ch core.entitlement_set_changes%ROWTYPE;
    pools bigint[];
    n integer;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT * INTO ch FROM core.entitlement_set_changes WHERE change_id = p_change AND NOT listed FOR UPDATE;
    IF ch.change_id IS NOT NULL AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('RuleChangeRow', p_change::text, 'FOR UPDATE', p_change);
    END IF;
    IF ch.change_id IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(pool_id ORDER BY pool_id) INTO pools FROM (
        SELECT DISTINCT c.pool_id
          FROM core.products p
          JOIN core.conferrals c ON c.product_id = p.product_id AND c.state = 'holding' AND c.pool_id > ch.listed_through
         WHERE p.entitlement_set_id = ch.entitlement_set_id
         ORDER BY c.pool_id LIMIT p_limit) x;
    n := coalesce(array_length(pools, 1), 0);
    IF n > 0 THEN
        INSERT INTO core.entitlement_set_change_obligations (act_id, pool_id)
        SELECT a.act_id, p.pool_id FROM core.entitlement_set_change_acts a CROSS JOIN unnest(pools) AS p(pool_id)
         WHERE a.change_id = p_change
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE core.entitlement_set_changes
       SET listed_through = coalesce(pools[n], listed_through), listed = (n < p_limit),
           pools_owed = pools_owed + n
     WHERE change_id = p_change;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION core.settle_change_pool(p_change bigint, p_pool bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    owed bigint[];
    v_act bigint;
BEGIN
    PERFORM core.assert_rendezvous();
    PERFORM core.lock_pool(p_pool);
    SELECT array_agg(o.act_id ORDER BY x.position) INTO owed
      FROM core.entitlement_set_change_obligations o
      JOIN core.entitlement_set_change_acts x ON x.act_id = o.act_id
     WHERE x.change_id = p_change AND o.pool_id = p_pool AND o.state <> 'settled';
    IF owed IS NULL THEN
        RETURN false;
    END IF;
    -- The owed rows FOR UPDATE in act_id order before the UPDATE (issue 36, defect 6): an
    -- operator's Retry (bring_failed_forward) locks failed rows in (pool_id, act_id) order, and a
    -- bare UPDATE would take them in whatever order it meets them, so the two could deadlock.
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        FOR v_act IN SELECT o.act_id FROM core.entitlement_set_change_obligations o
                      WHERE o.act_id = ANY (owed) AND o.pool_id = p_pool AND o.state <> 'settled'
                      ORDER BY o.act_id FOR UPDATE LOOP
            PERFORM core.note_lock('ChangeObligationRow', v_act::text || ',' || p_pool::text, 'FOR UPDATE',
                                   p_pool * 1000000000 + v_act);
        END LOOP;
    ELSE
        PERFORM 1 FROM core.entitlement_set_change_obligations o
          WHERE o.act_id = ANY (owed) AND o.pool_id = p_pool AND o.state <> 'settled'
          ORDER BY o.act_id FOR UPDATE;
    END IF;
    PERFORM core.materialize_pool(p_pool);
    -- Every owed act of the pool settles in one statement (what core.settle_obligation does per
    -- act, without a round of statements each): the pool row is held, so no other pass can be
    -- settling or failing these rows, and they are all this one pool's.
    UPDATE core.entitlement_set_change_obligations
       SET state = 'settled', settled_at = now(), attempts = attempts + 1, next_attempt_at = NULL
     WHERE act_id = ANY (owed) AND pool_id = p_pool AND state <> 'settled';
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION core.write_plan_act_obligations(p_act bigint, p_type bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    mark bigint;
    orgs bigint[];
    pools bigint[];
    n integer;
    v record;
BEGIN
    PERFORM core.assert_rendezvous();
    SELECT listed_through INTO mark FROM core.plan_act_reached_types
     WHERE plan_act_id = p_act AND org_type_id = p_type AND NOT listing_done;
    IF mark IS NULL THEN
        RETURN 0;
    END IF;
    -- A later act took the type's default over: it lists the type itself; this listing stops.
    IF NOT EXISTS (SELECT 1 FROM core.org_types WHERE org_type_id = p_type AND default_owner_act_id = p_act) THEN
        UPDATE core.plan_act_reached_types SET listing_done = true WHERE plan_act_id = p_act AND org_type_id = p_type;
        RETURN 0;
    END IF;
    SELECT array_agg(o.organization_id ORDER BY o.organization_id), array_agg(rp.pool_id ORDER BY o.organization_id)
      INTO orgs, pools
      FROM (SELECT organization_id FROM core.organizations
             WHERE org_type_id = p_type AND organization_id > mark ORDER BY organization_id LIMIT p_limit) o
      JOIN core.resource_pools rp ON rp.organization_id = o.organization_id AND rp.is_default;
    n := coalesce(array_length(orgs, 1), 0);
    IF n > 0 THEN
        IF current_setting('member_console.lock_trace', true) = 'on' THEN
            FOR v IN SELECT pool_id FROM core.resource_pools WHERE pool_id = ANY (pools) ORDER BY pool_id FOR KEY SHARE LOOP
                PERFORM core.note_lock('PoolRowKeyShare', v.pool_id::text, 'FOR KEY SHARE', v.pool_id);
            END LOOP;
            FOR v IN SELECT pool_id, plan_act_id FROM core.plan_act_obligations
                      WHERE pool_id = ANY (pools) AND plan_act_id < p_act AND org_type_id = p_type
                        AND state IN ('pending', 'failed')
                      ORDER BY pool_id, plan_act_id FOR UPDATE LOOP
                PERFORM core.note_lock('PlanActObligationRow', v.plan_act_id::text || ',' || v.pool_id::text,
                                       'FOR UPDATE', v.pool_id);
            END LOOP;
        ELSE
            PERFORM 1 FROM core.resource_pools WHERE pool_id = ANY (pools) ORDER BY pool_id FOR KEY SHARE;
            PERFORM 1 FROM core.plan_act_obligations
              WHERE pool_id = ANY (pools) AND plan_act_id < p_act AND org_type_id = p_type AND state IN ('pending', 'failed')
              ORDER BY pool_id, plan_act_id FOR UPDATE;
        END IF;
        UPDATE core.plan_act_obligations SET state = 'superseded', settled_at = now()
         WHERE pool_id = ANY (pools) AND plan_act_id < p_act AND org_type_id = p_type AND state IN ('pending', 'failed');
        INSERT INTO core.plan_act_obligations (plan_act_id, pool_id, organization_id, org_type_id)
        SELECT p_act, p.pool_id, p.organization_id, p_type
          FROM unnest(orgs, pools) AS p(organization_id, pool_id)
         ORDER BY p.organization_id
        ON CONFLICT DO NOTHING;
        UPDATE core.plan_act_reached_types SET listed_through = orgs[n]
         WHERE plan_act_id = p_act AND org_type_id = p_type;
    END IF;
    IF n < p_limit THEN
        UPDATE core.plan_act_reached_types SET listing_done = true WHERE plan_act_id = p_act AND org_type_id = p_type;
    END IF;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION core.lock_plan_act_obligation(p_act bigint, p_pool bigint)
RETURNS TABLE (state text, owns boolean, org_type_id bigint, from_ladder_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT o.state, t.default_owner_act_id = p_act, o.org_type_id, r.from_ladder_id
      FROM core.plan_act_obligations o
      JOIN core.org_types t ON t.org_type_id = o.org_type_id
      JOIN core.plan_act_reached_types r ON r.plan_act_id = o.plan_act_id AND r.org_type_id = o.org_type_id
     WHERE o.plan_act_id = p_act AND o.pool_id = p_pool
       FOR UPDATE OF o;
    IF FOUND AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('PlanActObligationRow', p_act::text || ',' || p_pool::text, 'FOR UPDATE', p_pool);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION core.record_plan_act_obligation_failure(p_act bigint, p_pool bigint, p_error text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    UPDATE core.plan_act_obligations SET state = 'failed', attempts = attempts + 1, last_error = left(p_error, 2000)
     WHERE plan_act_id = p_act AND pool_id = p_pool AND state = 'pending';
    -- The row lock of the bare UPDATE.
    IF FOUND AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('PlanActObligationRow', p_act::text || ',' || p_pool::text, 'UPDATE', p_pool);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION core.requeue_plan_act_obligations(p_act bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    n integer;
    v record;
BEGIN
    PERFORM core.assert_rendezvous();
    -- The act's row first: the drain's last probe takes it too, so a Retry and the act's finish
    -- cannot cross (a requeue the finish did not see would be left pending on a done act).
    PERFORM 1 FROM core.plan_acts WHERE plan_act_id = p_act FOR UPDATE;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('PlanActRow', p_act::text, 'FOR UPDATE', p_act);
        FOR v IN SELECT o.pool_id FROM core.plan_act_obligations o JOIN core.org_types t ON t.org_type_id = o.org_type_id
                  WHERE o.plan_act_id = p_act AND o.state = 'failed' AND t.default_owner_act_id = p_act
                  ORDER BY o.pool_id FOR UPDATE OF o LOOP
            PERFORM core.note_lock('PlanActObligationRow', p_act::text || ',' || v.pool_id::text, 'FOR UPDATE', v.pool_id);
        END LOOP;
    ELSE
        PERFORM 1 FROM core.plan_act_obligations o JOIN core.org_types t ON t.org_type_id = o.org_type_id
          WHERE o.plan_act_id = p_act AND o.state = 'failed' AND t.default_owner_act_id = p_act
          ORDER BY o.pool_id FOR UPDATE OF o;
    END IF;
    UPDATE core.plan_act_obligations o SET state = 'pending', last_error = NULL
      FROM core.org_types t
     WHERE t.org_type_id = o.org_type_id AND o.plan_act_id = p_act AND o.state = 'failed' AND t.default_owner_act_id = p_act;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE core.plan_acts SET state = 'running', finished_at = NULL WHERE plan_act_id = p_act;
    END IF;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION core.refuse_tier_product_without_set() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE s bigint;
BEGIN
    SELECT entitlement_set_id INTO s FROM core.products WHERE product_id = NEW.product_id FOR SHARE;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('ProductRowShare', NEW.product_id::text, 'FOR SHARE', NEW.product_id);
    END IF;
    IF s IS NULL THEN
        RAISE EXCEPTION 'tier_product_without_set' USING ERRCODE = 'MC003',
            CONSTRAINT = 'plan_ladder_tiers_product_has_set',
            DETAIL = format('product %s has no entitlement set', NEW.product_id);
    END IF;
    RETURN NEW;
END
$$;

-- The FedWiki functions and the site trigger ------------------------------------------------------

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
    END IF;
    RETURN format('%s %s %s', v_outcome, v_used, v_limit);
END
$$;

CREATE OR REPLACE FUNCTION fedwiki.set_site_placement_servability() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    v_site text;
    v_servable boolean;
    v_host text;
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
    -- The rows it changes FOR UPDATE in hostname order before the UPDATE (issue 36, defect 6):
    -- a release of the site's names (domains.delete_site_placements) takes them in the same
    -- order, so the two never hold one row each while waiting for the other's.
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        FOR v_host IN SELECT hostname FROM domains.placements
                       WHERE provider = 'fedwiki' AND object_id = v_site AND servable IS DISTINCT FROM v_servable
                       ORDER BY hostname FOR UPDATE LOOP
            PERFORM core.note_lock('PlacementRows', v_host, 'FOR UPDATE', NULL);
        END LOOP;
    ELSE
        PERFORM 1 FROM domains.placements
          WHERE provider = 'fedwiki' AND object_id = v_site AND servable IS DISTINCT FROM v_servable
          ORDER BY hostname FOR UPDATE;
    END IF;
    UPDATE domains.placements SET servable = v_servable
     WHERE provider = 'fedwiki' AND object_id = v_site AND servable IS DISTINCT FROM v_servable;
    -- The spec's path 61 (src/db/trace.rs, steps::FLAG_ONLY_CORRECTIONS).
    IF FOUND AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_marker('step', 'Registry: flag-only corrections by the site trigger');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION fedwiki.recount_site_usage(p_pool bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_used bigint;
BEGIN
    PERFORM 1 FROM core.numeric_entitlement_usage
     WHERE pool_id = p_pool AND resource_key = 'fedwiki.active_sites' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('UsageRow', p_pool::text || ',fedwiki.active_sites', 'FOR UPDATE', p_pool);
    END IF;
    v_used := fedwiki.count_slots(p_pool);
    UPDATE core.numeric_entitlement_usage SET used = v_used, counted_at = now()
     WHERE pool_id = p_pool AND resource_key = 'fedwiki.active_sites';
    RETURN v_used;
END
$$;

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
    IF FOUND AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('SiteRow', s.site_id, 'FOR UPDATE', NULL);
    END IF;
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

-- The desired-state functions -----------------------------------------------------------------------

CREATE OR REPLACE FUNCTION core.lock_desired_state_address(p_connection bigint, p_kind text, p_recipient bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(core.desired_state_address_key(p_connection::text, p_kind, p_recipient::text));
    IF current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('DesiredStateAddress', core.desired_state_address_key(p_connection::text, p_kind, p_recipient::text)::text, 'exclusive', NULL);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION core.recompute_desired_state_address(p_connection bigint, p_kind text, p_recipient bigint,
                                                     p_ask text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    r core.desired_state_records;
    fresh jsonb;
BEGIN
    -- A record is derived: a crash that loses this commit loses nothing, because the notice that
    -- asked for it is deleted by a later, synchronous commit, which flushes this one first.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM core.lock_desired_state_address(p_connection, p_kind, p_recipient);
    SELECT * INTO r FROM core.desired_state_records
     WHERE connection_id = p_connection AND recipient_kind = p_kind AND recipient_id = p_recipient
     FOR UPDATE;
    IF r.record_id IS NOT NULL AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('DesiredStateRecord', r.record_id::text, 'FOR UPDATE', r.record_id);
    END IF;
    fresh := core.desired_state_content(p_connection, p_kind, p_recipient);
    IF fresh IS NULL THEN
        IF r.record_id IS NULL THEN
            RETURN 'none';
        END IF;
        DELETE FROM core.desired_state_records WHERE record_id = r.record_id;
        RETURN 'deleted';
    END IF;
    IF r.record_id IS NULL THEN
        INSERT INTO core.desired_state_records (connection_id, recipient_kind, recipient_id, content, generation)
        VALUES (p_connection, p_kind, p_recipient, fresh, 1);
        RETURN 'created';
    END IF;
    IF p_ask = 'resend' THEN
        UPDATE core.desired_state_records
           SET content = fresh, generation = r.generation + (r.content IS DISTINCT FROM fresh)::int,
               changed_at = CASE WHEN r.content IS DISTINCT FROM fresh THEN now() ELSE r.changed_at END,
               confirmed_generation = 0, dispatched_generation = 0, failures = 0, due_at = now()
         WHERE record_id = r.record_id;
        RETURN CASE WHEN r.content IS DISTINCT FROM fresh THEN 'generation' ELSE 'due' END;
    END IF;
    IF r.content = fresh THEN
        IF p_ask = 'retry' AND r.confirmed_generation < r.generation THEN
            UPDATE core.desired_state_records SET due_at = now() WHERE record_id = r.record_id;
            RETURN 'due';
        END IF;
        RETURN 'unchanged';
    END IF;
    UPDATE core.desired_state_records
       SET content = fresh, generation = r.generation + 1, changed_at = now(),
           -- Due when it was (an idle record's due_at is past): a push in flight keeps the new
           -- generation waiting for its answer, so two pushes of one record never overlap and
           -- cannot arrive out of order; a failing endpoint's backoff keeps running.
           due_at = CASE WHEN p_ask = 'retry' THEN least(r.due_at, now()) ELSE r.due_at END
     WHERE record_id = r.record_id;
    RETURN 'generation';
END
$$;

CREATE OR REPLACE FUNCTION core.write_desired_state_push_answer(p_record bigint, p_generation bigint, p_ok boolean,
                                                     p_answer text, p_base_secs double precision,
                                                     p_cap_secs double precision, p_url text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    a record;
    r core.desired_state_records;
BEGIN
    -- The address columns never change, so reading them before the lock is safe.
    SELECT connection_id, recipient_kind, recipient_id INTO a FROM core.desired_state_records WHERE record_id = p_record;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM core.lock_desired_state_address(a.connection_id, a.recipient_kind, a.recipient_id);
    SELECT * INTO r FROM core.desired_state_records WHERE record_id = p_record FOR UPDATE;
    IF r.record_id IS NOT NULL AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('DesiredStateRecord', r.record_id::text, 'FOR UPDATE', r.record_id);
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- p_url is where the push went. An answer from a URL the connection no longer has confirms
    -- nothing for the new one: the record is due again. (A URL changed after this check is
    -- followed by its resend notice, whose recompute unconfirms the record under this lock.)
    IF p_url IS DISTINCT FROM (SELECT url FROM core.desired_state_connections WHERE connection_id = a.connection_id) THEN
        UPDATE core.desired_state_records
           SET last_answer = 'answered by the connection''s previous URL; sent again to the new one',
               last_answer_at = now(), due_at = now()
         WHERE record_id = p_record;
        RETURN true;
    END IF;
    IF p_ok THEN
        UPDATE core.desired_state_records
           SET confirmed_generation = greatest(r.confirmed_generation, least(p_generation, r.generation)),
               confirmed_at = now(), failures = 0, last_answer = p_answer, last_answer_at = now(),
               drift = false, due_at = now()
         WHERE record_id = p_record;
    ELSE
        UPDATE core.desired_state_records
           SET failures = r.failures + 1, last_answer = p_answer, last_answer_at = now(),
               due_at = now() + make_interval(secs => least(p_cap_secs, p_base_secs * 2 ^ least(r.failures, 30))
                                                         * (0.5 + random() / 2))
         WHERE record_id = p_record;
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION core.write_desired_state_read_back(p_record bigint, p_found boolean, p_generation bigint,
                                                   p_content jsonb) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, core, pg_temp AS $$
DECLARE
    a record;
    r core.desired_state_records;
    drifted boolean;
BEGIN
    SELECT connection_id, recipient_kind, recipient_id INTO a FROM core.desired_state_records WHERE record_id = p_record;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM core.lock_desired_state_address(a.connection_id, a.recipient_kind, a.recipient_id);
    SELECT * INTO r FROM core.desired_state_records WHERE record_id = p_record FOR UPDATE;
    IF r.record_id IS NOT NULL AND current_setting('member_console.lock_trace', true) = 'on' THEN
        PERFORM core.note_lock('DesiredStateRecord', r.record_id::text, 'FOR UPDATE', r.record_id);
    END IF;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Only a record the remote confirmed at its current generation can drift; one still behind is
    -- on its way anyway. Drift is repaired with a new generation of the same content: a remote
    -- keeps the newest generation it holds, so the generation it already claims would be refused
    -- as stale, and no generation is ever sent with two contents.
    drifted := r.confirmed_generation = r.generation
               AND NOT (p_found AND p_generation = r.generation AND p_content = r.content);
    UPDATE core.desired_state_records
       SET observed_generation = CASE WHEN p_found THEN p_generation END,
           observed_content = CASE WHEN p_found THEN p_content END,
           observed_at = now(), drift = drifted,
           generation = CASE WHEN drifted THEN r.generation + 1 ELSE r.generation END,
           changed_at = CASE WHEN drifted THEN now() ELSE r.changed_at END,
           due_at = CASE WHEN drifted THEN now() ELSE r.due_at END
     WHERE record_id = p_record;
    RETURN drifted;
END
$$;

RESET ROLE;
